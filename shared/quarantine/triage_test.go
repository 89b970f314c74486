package quarantine_test

import (
	"bytes"
	"encoding/json"
	"strings"
	"testing"

	"github.com/stretchr/testify/require"

	"github.com/aivedio/pipeline/shared/quarantine"
)

func TestCategorize(t *testing.T) {
	t.Parallel()
	for _, tt := range []struct {
		class, code, last string
		want              quarantine.Category
	}{
		{"permanent", "envelope.unsupported_schema", "", quarantine.CodeDefect},
		{"permanent", "event.type_not_handled", "", quarantine.CodeDefect},
		{"permanent", "inbox.payload_mismatch", "", quarantine.CodeDefect},
		{"permanent", "something.new", "", quarantine.CodeDefect},
		{"permanent", "not_cloudevent", "", quarantine.DataDefect},
		{"permanent", "envelope.malformed", "", quarantine.DataDefect},
		{"permanent", "payload.invalid", "", quarantine.DataDefect},
		{"permanent", "asset.bad_key", "", quarantine.DataDefect},
		{"permanent", "security.tenant_mismatch", "", quarantine.Permission},
		{"permanent", "provider.identity_mismatch", "", quarantine.Permission},
		{"permanent", "envelope.tenant_missing", "", quarantine.Permission},
		{"permanent", "task.not_found", "", quarantine.DirtyHistory},
		{"permanent", "asset.wrong_task", "", quarantine.DirtyHistory},
		{"permanent", "media.source_missing", "", quarantine.DirtyHistory},
		{"permanent", "billing.no_reservation", "", quarantine.DirtyHistory},
		{"dlq", "max_delivery_attempts", "", quarantine.Dependency},
		{"dlq", "max_delivery_attempts", "provider.unavailable", quarantine.Dependency},
		{"dlq", "max_delivery_attempts", "http.503", quarantine.Dependency},
		{"dlq", "max_delivery_attempts", "task.contended", quarantine.Dependency},
		{"dlq", "max_delivery_attempts", "unclassified", quarantine.CodeDefect},
		{"dlq", "max_delivery_attempts", "http.500", quarantine.CodeDefect},
		{"dlq", "max_delivery_attempts", "render.not_found", quarantine.DirtyHistory},
		{"dlq", "max_delivery_attempts", "inbox.deadlock", quarantine.Dependency},
		{"dlq", "max_delivery_attempts", "inbox.serialization_failure", quarantine.Dependency},
		{"dlq", "max_delivery_attempts", "media.probe_failed", quarantine.Dependency},
		{"permanent", "provider.rejected", "", quarantine.DataDefect},
		{"permanent", "media.not_a_video", "", quarantine.DataDefect},
		{"permanent", "tenant.mismatch", "", quarantine.Permission},
		{"permanent", "render.spec_conflict", "", quarantine.CodeDefect},
		{"permanent", "http.422", "", quarantine.DataDefect},
	} {
		require.Equal(t, tt.want, quarantine.Categorize(tt.class, tt.code, tt.last), "%s %s %s", tt.class, tt.code, tt.last)
	}
}

func TestSnapshotRedactsAndBounds(t *testing.T) {
	t.Parallel()
	body := `{"task_id":"t-1","api_key":"sk-live-123","nested":{"Authorization":"Bearer abc","note":"token=xyz and more"},
		"output_url":"https://bucket.s3.example/out.mp4?X-Amz-Credential=AK%2F1&X-Amz-Signature=deadbeef","list":[{"password":"p"}]}`
	snap := string(quarantine.Snapshot([]byte(body)))
	for _, secret := range []string{"sk-live-123", "Bearer abc", "xyz", "deadbeef", "AK%2F1", `"p"`} {
		require.NotContains(t, snap, secret)
	}
	var v map[string]any
	require.NoError(t, json.Unmarshal([]byte(snap), &v))
	require.Equal(t, "t-1", v["task_id"], "what is no secret stays")
	require.Equal(t, "https://bucket.s3.example/out.mp4?[redacted]", v["output_url"])

	big := `{"prompt":"` + strings.Repeat("a cat ", 5000) + `","secret":"s3cr3t"}`
	snap = string(quarantine.Snapshot([]byte(big)))
	require.LessOrEqual(t, len(snap), 16<<10)
	require.NotContains(t, snap, "s3cr3t")
	require.Contains(t, snap, `"truncated":true`)

	for _, leak := range []string{
		"Authorization: Bearer eyJhbGciOiJIUzI1NiJ9.eyJzdWIiOiIxIn0.sig-part",
		`{"dsn":"postgres://app:hunter2@db:5432/x"}`,
		"dial postgres://app:hunter2@db:5432/x: refused",
		`{"aws_access_key_id":"AKIA123","db_pass":"p4ss","auth":"x"}`,
	} {
		snap := string(quarantine.Snapshot([]byte(leak)))
		for _, secret := range []string{"eyJhbGciOiJIUzI1NiJ9", "hunter2", "AKIA123", "p4ss", `"auth":"x"`} {
			require.NotContains(t, snap, secret, "%s", leak)
		}
	}
	require.Equal(t, `Get "https://cdn.example/x.mp4?[redacted]": EOF`, quarantine.Redact(`Get "https://cdn.example/x.mp4?token=SECRET": EOF`))
	require.JSONEq(t, `{"n":9007199254740993,"html":"<a>&"}`, string(quarantine.Snapshot([]byte(`{"n":9007199254740993,"html":"<a>&"}`))))

	text := string(quarantine.Snapshot([]byte("not json; password=hunter2")))
	require.Contains(t, text, `"json":false`)
	require.NotContains(t, text, "hunter2")
	require.Contains(t, string(quarantine.Snapshot([]byte{0x00, 0xff, 0x01})), `"binary":true`)
}

// FuzzSnapshot: whatever the body, the snapshot is valid JSON that fits the
// column (the CHECK allows 16 KiB of text), so no body can make a message
// impossible to quarantine.
func FuzzSnapshot(f *testing.F) {
	f.Add([]byte(`{"a":"b"}`))
	f.Add(bytes.Repeat([]byte{0x01}, 4000))
	f.Add(bytes.Repeat([]byte(`"\u0001`), 3000))
	f.Add([]byte(`{"k":"` + strings.Repeat("\u0000", 5000) + `"}`))
	f.Fuzz(func(t *testing.T, body []byte) {
		snap := quarantine.Snapshot(body)
		require.True(t, json.Valid(snap), "%q", snap)
		require.LessOrEqual(t, len(snap), 8<<10)
	})
}
