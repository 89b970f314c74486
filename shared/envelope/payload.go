package envelope

import (
	"encoding/json"
	"errors"
	"reflect"
	"strings"
)

// DecodePayload reads e's payload into a T, by the compatibility rule of
// the package doc: a field T does not know is ignored (a newer producer of
// the same schema version added it), a field T marks `payload:"required"`
// must be present and non-zero, and a known field of the wrong type is
// refused. T is a struct. Every error it returns is a [*ValidationError]
// whose Field is "payload" or "payload.<field>".
//
// During a dual-read window a payload of an older schema version than the
// newest this build reads is read by T's own [Upgrader], when T has one:
// the per-type hook that maps the old shape onto the new.
func DecodePayload[T any](e Envelope) (T, error) {
	var v T
	read := func() error { return json.Unmarshal(e.Payload, &v) }
	if u, ok := any(&v).(Upgrader); ok && e.SchemaVersion < NewestReadSchemaVersion {
		read = func() error { return u.UpgradeFrom(e.SchemaVersion, e.Payload) }
	}
	if err := read(); err != nil {
		field := "payload"
		var typeErr *json.UnmarshalTypeError
		if errors.As(err, &typeErr) && typeErr.Field != "" {
			field += "." + typeErr.Field
		}
		return v, invalid(ClassMalformed, field, "of %s does not fit its schema: %v", e.EventType, err)
	}
	if name, ok := missingRequired(reflect.ValueOf(v)); ok {
		return v, invalid(ClassMissingField, "payload."+name, "is required in %s", e.EventType)
	}
	return v, nil
}

// Upgrader is a payload type (by pointer) that reads the payload of an
// older schema version itself: the version, and the payload as the older
// producer wrote it. A type whose shape did not change across the window
// needs none. An error is refused like a payload that does not fit.
type Upgrader interface {
	UpgradeFrom(schemaVersion int, payload json.RawMessage) error
}

// missingRequired names the first field of struct v tagged
// `payload:"required"` that holds its zero value.
func missingRequired(v reflect.Value) (string, bool) {
	if v.Kind() != reflect.Struct {
		return "", false
	}
	for i := range v.NumField() {
		f := v.Type().Field(i)
		if f.Tag.Get("payload") != "required" || !v.Field(i).IsZero() {
			continue
		}
		name, _, _ := strings.Cut(f.Tag.Get("json"), ",")
		if name == "" {
			name = f.Name
		}
		return name, true
	}
	return "", false
}
