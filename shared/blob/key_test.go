package blob_test

import (
	"fmt"
	"strings"
	"testing"

	"github.com/stretchr/testify/require"

	"github.com/aivedio/pipeline/shared/blob"
)

func TestKey(t *testing.T) {
	t.Parallel()

	good := []struct {
		name                     string
		tenant, task, kind, file string
		want                     string
	}{
		{"plain", "acme", "0190c1c2-7d1e-7000-8000-000000000001", "output", "0.mp4",
			"tenants/acme/tasks/0190c1c2-7d1e-7000-8000-000000000001/output/0.mp4"},
		{"dots inside a name", "t1", "task1", "thumbnail", "frame.0001.jpg",
			"tenants/t1/tasks/task1/thumbnail/frame.0001.jpg"},
		{"space and unicode", "t1", "task1", "render", "clip final é.mov",
			"tenants/t1/tasks/task1/render/clip final é.mov"},
		{"leading dot", "t1", "task1", "meta", ".probe.json",
			"tenants/t1/tasks/task1/meta/.probe.json"},
	}
	for _, tc := range good {
		t.Run(tc.name, func(t *testing.T) {
			t.Parallel()
			key, err := blob.Key(tc.tenant, tc.task, tc.kind, tc.file)
			require.NoError(t, err)
			require.Equal(t, tc.want, key)

			again, err := blob.Key(tc.tenant, tc.task, tc.kind, tc.file)
			require.NoError(t, err)
			require.Equal(t, key, again, "keys must be deterministic")
		})
	}

	bad := []struct {
		name                     string
		tenant, task, kind, file string
		wantErr                  string
	}{
		{"empty tenant", "", "task", "output", "0.mp4", "tenant id"},
		{"empty task", "t", "", "output", "0.mp4", "task id"},
		{"empty kind", "t", "task", "", "0.mp4", "kind"},
		{"empty name", "t", "task", "output", "", "name"},
		{"slash in tenant", "a/b", "task", "output", "0.mp4", `"/"`},
		{"slash in name", "t", "task", "output", "dir/0.mp4", `"/"`},
		{"backslash", "t", "task", "output", `..\0.mp4`, `must not contain`},
		{"dot dot", "t", "..", "output", "0.mp4", `".."`},
		{"dot dot inside", "t", "task", "output", "a..b", `".."`},
		{"single dot", "t", "task", ".", "0.mp4", `"."`},
		{"newline", "t", "task", "output", "0\n.mp4", "printable"},
		{"nul", "t\x00", "task", "output", "0.mp4", "printable"},
		{"invalid utf8", "t", "task\xff", "output", "0.mp4", "UTF-8"},
		{"too long", "t", "task", "output", strings.Repeat("a", 1000), "1024"},
	}
	for _, tc := range bad {
		t.Run(tc.name, func(t *testing.T) {
			t.Parallel()
			key, err := blob.Key(tc.tenant, tc.task, tc.kind, tc.file)
			require.ErrorContains(t, err, tc.wantErr)
			require.Empty(t, key)
		})
	}
}

func ExampleKey() {
	key, err := blob.Key("acme", "0190c1c2-7d1e-7000-8000-000000000001", "output", "0.mp4")
	if err != nil {
		panic(err)
	}
	fmt.Println(key)

	_, err = blob.Key("acme", "../other-tenant", "output", "0.mp4")
	fmt.Println(err)
	// Output:
	// tenants/acme/tasks/0190c1c2-7d1e-7000-8000-000000000001/output/0.mp4
	// object key task id "../other-tenant": must not contain "/" or "\"
}
