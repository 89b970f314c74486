package api

import (
	"encoding/json"
	"errors"
	"io"
	"mime"
	"net/http"
	"reflect"
	"strings"
)

// decodeJSON reads the request body into dst, a pointer to a struct, and
// refuses everything but exactly one JSON object of known fields within
// maxBytes.
func decodeJSON(w http.ResponseWriter, r *http.Request, maxBytes int64, dst any) *apiError {
	if ct := r.Header.Get("Content-Type"); ct != "" {
		mt, _, err := mime.ParseMediaType(ct)
		if err != nil || mt != "application/json" {
			return errorf(http.StatusUnsupportedMediaType, CodeUnsupportedMediaType,
				"the body must be JSON: send Content-Type: application/json, not %q (curl -d sends a form type unless told otherwise)", truncate(ct, 64))
		}
	}
	dec := json.NewDecoder(http.MaxBytesReader(w, r.Body, maxBytes))
	dec.DisallowUnknownFields()
	if err := dec.Decode(dst); err != nil {
		return decodeError(err, maxBytes, dst)
	}
	// Exactly one value: anything after it but whitespace is refused, so a
	// body is never half read.
	if _, err := dec.Token(); !errors.Is(err, io.EOF) {
		var tooLarge *http.MaxBytesError
		if errors.As(err, &tooLarge) {
			return bodyTooLarge(maxBytes)
		}
		return errorf(http.StatusBadRequest, CodeMalformedJSON, "the body has data after its JSON object; send exactly one object")
	}
	return nil
}

func bodyTooLarge(maxBytes int64) *apiError {
	return errorf(http.StatusRequestEntityTooLarge, CodeBodyTooLarge, "the body is larger than the limit of %d bytes", maxBytes)
}

func decodeError(err error, maxBytes int64, dst any) *apiError {
	var (
		tooLarge  *http.MaxBytesError
		syntax    *json.SyntaxError
		typeError *json.UnmarshalTypeError
	)
	switch {
	case errors.As(err, &tooLarge):
		return bodyTooLarge(maxBytes)
	case errors.Is(err, io.EOF):
		return errorf(http.StatusBadRequest, CodeMalformedJSON, "the body is empty; send a JSON object")
	case errors.Is(err, io.ErrUnexpectedEOF):
		return errorf(http.StatusBadRequest, CodeMalformedJSON, "the body ends in the middle of its JSON object")
	case errors.As(err, &syntax):
		return errorf(http.StatusBadRequest, CodeMalformedJSON, "the body is not valid JSON at byte %d: %s", syntax.Offset, strings.TrimPrefix(syntax.Error(), "json: "))
	case errors.As(err, &typeError):
		if typeError.Field == "" {
			return errorf(http.StatusBadRequest, CodeMalformedJSON, "the body must be a JSON object, not a JSON %s", typeError.Value)
		}
		// The field's own type: for an array field, Type is its element's.
		want := typeError.Type
		if f, ok := jsonField(dst, typeError.Field); ok {
			want = f
		}
		return errorf(http.StatusBadRequest, CodeInvalidField, "field %s must be %s, not a JSON %s", typeError.Field, kindName(want), typeError.Value)
	}
	// encoding/json has no type for an unknown field; its message is
	// stable: json: unknown field "name".
	if name, ok := strings.CutPrefix(err.Error(), "json: unknown field "); ok {
		return errorf(http.StatusBadRequest, CodeUnknownField, "unknown field %s; the accepted fields are %s", name, strings.Join(jsonFields(dst), ", "))
	}
	return errorf(http.StatusBadRequest, CodeMalformedJSON, "the body is not a valid JSON object: %s", strings.TrimPrefix(err.Error(), "json: "))
}

// kindName says what a field of type t takes, in JSON words.
func kindName(t reflect.Type) string {
	for t.Kind() == reflect.Pointer {
		t = t.Elem()
	}
	switch t.Kind() {
	case reflect.String:
		return "a string"
	case reflect.Int, reflect.Int8, reflect.Int16, reflect.Int32, reflect.Int64,
		reflect.Uint, reflect.Uint8, reflect.Uint16, reflect.Uint32, reflect.Uint64:
		return "an integer"
	case reflect.Float32, reflect.Float64:
		return "a number"
	case reflect.Bool:
		return "true or false"
	case reflect.Slice, reflect.Array:
		return "an array of " + strings.TrimPrefix(strings.TrimPrefix(kindName(t.Elem()), "a "), "an ") + "s"
	}
	return "an object"
}

// jsonFields lists the JSON names of the struct dst points to.
func jsonFields(dst any) []string {
	var names []string
	eachField(dst, func(name string, _ reflect.Type) { names = append(names, name) })
	return names
}

// jsonField finds the type of the top-level field named name.
func jsonField(dst any, name string) (reflect.Type, bool) {
	var found reflect.Type
	eachField(dst, func(n string, t reflect.Type) {
		if n == name {
			found = t
		}
	})
	return found, found != nil
}

func eachField(dst any, fn func(name string, t reflect.Type)) {
	t := reflect.TypeOf(dst)
	for t.Kind() == reflect.Pointer {
		t = t.Elem()
	}
	for i := range t.NumField() {
		name, _, _ := strings.Cut(t.Field(i).Tag.Get("json"), ",")
		if name != "" && name != "-" {
			fn(name, t.Field(i).Type)
		}
	}
}
