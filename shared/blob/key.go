package blob

import (
	"errors"
	"fmt"
	"strings"
	"unicode"
	"unicode/utf8"
)

// maxKeyBytes is S3's limit on the length of an object key.
const maxKeyBytes = 1024

// Key returns the deterministic object key of one media object of a task:
//
//	tenants/<tenantID>/tasks/<taskID>/<kind>/<name>
//
// The same arguments always give the same key, so a stage that runs again for
// the same task overwrites its earlier object instead of duplicating it. Kind
// names the role of the object (for example "output", "proxy", "thumbnail")
// and name the file within it (for example "0.mp4").
//
// Every component must be non-empty valid UTF-8 of printable characters,
// without "/", "\" or "..", so that one component can never reach into
// another tenant's or task's prefix.
func Key(tenantID, taskID, kind, name string) (string, error) {
	for _, c := range []struct{ field, value string }{
		{"tenant id", tenantID},
		{"task id", taskID},
		{"kind", kind},
		{"name", name},
	} {
		if err := checkComponent(c.value); err != nil {
			return "", fmt.Errorf("object key %s %q: %w", c.field, c.value, err)
		}
	}
	key := "tenants/" + tenantID + "/tasks/" + taskID + "/" + kind + "/" + name
	if len(key) > maxKeyBytes {
		return "", fmt.Errorf("object key is %d bytes, over the S3 limit of %d", len(key), maxKeyBytes)
	}
	return key, nil
}

// checkComponent reports why s cannot be one segment of an object key.
func checkComponent(s string) error {
	switch {
	case s == "":
		return errors.New("must not be empty")
	case !utf8.ValidString(s):
		return errors.New("must be valid UTF-8")
	case strings.ContainsAny(s, `/\`):
		return errors.New(`must not contain "/" or "\"`)
	case strings.Contains(s, ".."):
		return errors.New(`must not contain ".."`)
	case s == ".":
		return errors.New(`must not be "."`)
	}
	for _, r := range s {
		if !unicode.IsPrint(r) {
			return fmt.Errorf("must be printable, has %U", r)
		}
	}
	return nil
}

// RenderKey returns the object key of one file of the render output whose
// content key is renderKey (its chunks, the joined output):
//
//	tenants/<tenantID>/renders/<renderKey>/<name>
//
// with the same component rules as [Key]. Renders of the same content
// share it: the output is stored once per tenant.
func RenderKey(tenantID, renderKey, name string) (string, error) {
	for _, c := range []struct{ field, value string }{
		{"tenant id", tenantID},
		{"render key", renderKey},
		{"name", name},
	} {
		if err := checkComponent(c.value); err != nil {
			return "", fmt.Errorf("object key %s %q: %w", c.field, c.value, err)
		}
	}
	return "tenants/" + tenantID + "/renders/" + renderKey + "/" + name, nil
}
