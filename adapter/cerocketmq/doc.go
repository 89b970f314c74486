// Package cerocketmq is a CloudEvents protocol binding for RocketMQ 5, shaped
// like cloudevents/sdk-go's own transports: [WriteMessage] turns any
// binding.Message into a broker message, [Sender] is a protocol.Sender over an
// mq.Producer, and [NewMessage] reads a received broker message as a
// binding.Message.
//
// # Mapping
//
// Attributes, extensions and data map to message properties and body as
// shared/ceprops defines: binary mode (the default) puts every context
// attribute and extension in a property named "CE_" + its name and the data
// in the body; structured mode puts the whole event in the body under the
// content type "application/cloudevents+json". Writing and reading share
// that one mapping with replay, which reads quarantined messages back.
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
// A [Message] settles through the function it was made with: Finish calls
// it with the result, in sdk-go's sense (nil or protocol.ResultACK is an
// ACK), and returns what settling returned. The source adapter makes each
// message it receives with the function that ACKs it or hands it back, and
// finishes it once, after the effect of the event is durable: an ACK is
// final. A Message made with nil settles nothing: Finish is a no-op, for a
// reader that does not own the message (the dead-letter drain settles its
// messages itself).
package cerocketmq
