package envelope

import (
	"errors"
	"fmt"
)

// ErrInvalid matches every [*ValidationError] under [errors.Is], so a caller
// that only needs "is this envelope unusable?" does not have to know the
// classes.
var ErrInvalid = errors.New("invalid envelope")

// Class says why an envelope was refused. Every class is permanent: the same
// bytes fail the same way on every delivery, so the source adapter
// quarantines the message and ACKs it instead of retrying (docs/design.md §6).
type Class string

// The validation classes. Their string values are stable: they are stored in
// message_quarantine and used as metric labels.
const (
	// ClassMalformed: the bytes are not an envelope at all (invalid JSON, an
	// unknown or mistyped field, a CloudEvent without a context).
	ClassMalformed Class = "malformed"
	// ClassMissingField: a required field or CloudEvents attribute is absent.
	ClassMissingField Class = "missing_field"
	// ClassUnsupportedSchema: schema_version is not one this build reads.
	ClassUnsupportedSchema Class = "unsupported_schema"
	// ClassPayloadTooLarge: the payload exceeds [MaxPayloadBytes].
	ClassPayloadTooLarge Class = "payload_too_large"
	// ClassBadID: an identifier (event_id, aggregate_id, tenant_id,
	// correlation_id, causation_id) is not well-formed.
	ClassBadID Class = "bad_id"
	// ClassTenantMissing: tenant_id (CloudEvents extension tenantid) is absent.
	ClassTenantMissing Class = "tenant_missing"
	// ClassBadAttribute: a field is present but has the wrong form: event
	// type, producer, occurred_at range, trace id, CloudEvents source prefix,
	// traceparent, datacontenttype, or a payload that is not a JSON object.
	ClassBadAttribute Class = "bad_attribute"
)

// ValidationError reports the first problem found in an envelope or in the
// CloudEvent it came from. It is permanent by nature: retrying cannot fix it.
//
// Field names the envelope field (event_id, payload, ...) or, for problems
// only a CloudEvent can have, the CloudEvents attribute (source, traceparent,
// datacontenttype, ...). Field is empty when the input as a whole is bad.
type ValidationError struct {
	Class  Class
	Field  string
	Reason string
}

// Error reads "envelope: <field>: <reason>", for example
// "envelope: schema_version: 7 is not supported (supported: 1)".
func (e *ValidationError) Error() string {
	if e.Field == "" {
		return "envelope: " + e.Reason
	}
	return "envelope: " + e.Field + ": " + e.Reason
}

// Is reports whether target is [ErrInvalid], which every ValidationError
// matches.
func (e *ValidationError) Is(target error) bool {
	return target == ErrInvalid
}

// ClassOf returns the class of the first [*ValidationError] in err's chain,
// and false when err holds none (for example a nil error, or a failure to
// generate an event id, which is not the envelope's fault).
func ClassOf(err error) (Class, bool) {
	var verr *ValidationError
	if errors.As(err, &verr) {
		return verr.Class, true
	}
	return "", false
}

func invalid(class Class, field, format string, args ...any) *ValidationError {
	return &ValidationError{Class: class, Field: field, Reason: fmt.Sprintf(format, args...)}
}
