// Package ceprops is the one mapping between a CloudEvent and a broker
// message's properties and body: the CloudEvents RocketMQ binding
// (adapter/cerocketmq) writes and reads live messages with it, and replay
// reads the ones message_quarantine kept, so a quarantined message is read
// back exactly as the adapter read it.
//
// # Mapping
//
// Binary mode puts every context attribute and extension in a property
// named [Prefix] + its name (CE_id, CE_source, CE_type, CE_tenantid, ...)
// and the data in the body. The content type has one spelling in both
// modes, [ContentType] (CE_datacontenttype): in binary mode it holds the
// data's content type, in structured mode [ContentTypeStructured], and the
// body is then the whole event in JSON.
//
// A message with neither a structured content type nor a known
// CE_specversion is no CloudEvent: reading it fails with
// [ErrNotCloudEvent], and it can never become one, so it is poison, not a
// retryable failure.
package ceprops
