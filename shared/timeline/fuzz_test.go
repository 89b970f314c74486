package timeline_test

import (
	"errors"
	"os"
	"path/filepath"
	"testing"

	"github.com/aivedio/pipeline/shared/timeline"
)

// FuzzOTIO: any bytes either lower to a spec within the limits or are
// refused with a path; nothing panics.
func FuzzOTIO(f *testing.F) {
	files, _ := filepath.Glob(filepath.Join("testdata", "*.otio"))
	for _, name := range files {
		raw, err := os.ReadFile(name)
		if err != nil {
			f.Fatal(err)
		}
		f.Add(raw)
	}
	f.Add([]byte(`{"OTIO_SCHEMA":"Timeline.1","tracks":{"OTIO_SCHEMA":"Stack.1","children":[]}}`))
	f.Fuzz(func(t *testing.T, raw []byte) {
		o, err := timeline.ParseOTIO(raw)
		if err != nil {
			return
		}
		spec, err := o.Lower(library)
		var te *timeline.Error
		switch {
		case err != nil && !errors.As(err, &te):
			t.Fatalf("refusal without a path: %v", err)
		case err != nil && te.Path == "":
			t.Fatalf("refusal with an empty path: %v", err)
		case err == nil && (spec.DurationUS <= 0 || spec.Duration() > timeline.MaxDuration || len(spec.Clips) > timeline.MaxClips):
			t.Fatalf("spec outside the limits: %+v", spec)
		}
	})
}
