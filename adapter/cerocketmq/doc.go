// Package cerocketmq is a CloudEvents protocol binding for RocketMQ 5, shaped
// like cloudevents/sdk-go's own transports: [WriteMessage] turns any
// binding.Message into a broker message, [Sender] is a protocol.Sender over an
// mq.Producer, and [Receiver] is a protocol.Receiver over an mq.Consumer whose
// messages settle on Finish.
//
// # Mapping
//
// Binary mode (the default) puts every context attribute and extension in a
// message property named "CE_" + its name (CE_id, CE_source, CE_type,
// CE_tenantid, ...) and the data in the body. The content type has one
// spelling in both modes, [PropertyContentType] (CE_datacontenttype): in
// binary mode it holds the data's content type, in structured mode
// "application/cloudevents+json", and the body is the whole event in JSON.
//
// RocketMQ's own fields, which the draft RocketMQ binding leaves open, are
// filled the same way in both modes:
//
//   - message keys = the event id, so the broker's key index finds an event;
//   - tag = the event type, unless [WithTag] names another (consumer groups
//     filter on tags);
//   - message group = [WithMessageGroup], required on FIFO topics;
//   - delivery timestamp = [WithDeliveryTime], for DELAY topics.
//
// # Settlement
//
// A message from [Receiver] is ACKed by Finish(nil) or Finish(protocol.ResultACK).
// Any other Finish error hands it back to the broker: its invisible duration
// becomes the receiver's retry delay for its delivery attempt, after which it
// is delivered again, until the consumer group's maximum delivery attempts
// send it to the group's dead-letter topic. Finish must be called only once
// the effect of the event is durable: an ACK is final.
package cerocketmq
