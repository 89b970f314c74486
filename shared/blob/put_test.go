package blob

import (
	"bytes"
	"crypto/sha256"
	"testing"

	"github.com/aws/aws-sdk-go-v2/aws"
	"github.com/stretchr/testify/require"
)

func TestPutKeyNeedsEscaping(t *testing.T) {
	t.Parallel()
	for _, backend := range backends {
		t.Run(backend.name, func(t *testing.T) {
			t.Parallel()
			b := setup(t, backend)
			ctx := testContext(t)

			// The multipart path names the key again in CopyObject's
			// x-amz-copy-source, where it travels URL-encoded.
			const size = PartSize + 1<<20
			want := mediaSHA256(t, 20, size)
			key := b.key(t, "task 1", "clip final+é%20(1).mp4")

			obj, err := b.store.Put(ctx, key, media(20, size), nil)
			require.NoError(t, err)
			require.Equal(t, 2, obj.Parts)

			stat, err := b.store.Stat(ctx, key)
			require.NoError(t, err)
			require.Equal(t, want, stat.SHA256)

			objects, _ := b.list(t)
			require.Len(t, objects, 1)
			require.Equal(t, key, aws.ToString(objects[0].Key))
		})
	}
}

func TestRecordSHA256RefusesReplacedObject(t *testing.T) {
	t.Parallel()
	for _, backend := range backends {
		t.Run(backend.name, func(t *testing.T) {
			t.Parallel()
			backend.need(t, copyIfMatch)
			b := setup(t, backend)
			ctx := testContext(t)
			key := b.key(t, "task-1", "out.mp4")

			obj, err := b.store.Put(ctx, key, media(21, PartSize+1), nil)
			require.NoError(t, err)

			// A Put whose upload was overtaken by another writer holds an ETag the
			// object no longer has: its digest must not be attached.
			stale := obj
			stale.ETag = `"0123456789abcdef0123456789abcdef-2"`
			stale.SHA256 = "00" + obj.SHA256[2:]
			_, err = b.store.recordSHA256(ctx, stale)
			require.ErrorContains(t, err, "concurrent write")

			stat, err := b.store.Stat(ctx, key)
			require.NoError(t, err)
			require.Equal(t, obj.SHA256, stat.SHA256)
		})
	}
}

func TestPutSingleServerVerifiesDigest(t *testing.T) {
	t.Parallel()
	for _, backend := range backends {
		t.Run(backend.name, func(t *testing.T) {
			t.Parallel()
			backend.need(t, serverChecksum)
			b := setup(t, backend)
			ctx := testContext(t)
			key := b.key(t, "task-1", "thumb.jpg")

			// A digest that does not match the bytes sent: the server must refuse
			// the object rather than store it under a wrong sha256.
			body := &digestReader{hash: sha256.New()}
			body.hash.Write([]byte("other bytes"))
			_, err := b.store.putSingle(ctx, key, bytes.Repeat([]byte("x"), 1000), body, PutOpts{ContentType: defaultContentType})
			require.Error(t, err)

			_, err = b.store.Stat(ctx, key)
			require.ErrorIs(t, err, ErrNotFound)
		})
	}
}

func TestCopySource(t *testing.T) {
	t.Parallel()
	for key, want := range map[string]string{
		"tenants/a/tasks/b/output/0.mp4": "bucket/tenants/a/tasks/b/output/0.mp4",
		"a b+c":                          "bucket/a%20b%2Bc",
		"é/100%":                         "bucket/%C3%A9/100%25",
		"x~y_z-1.2":                      "bucket/x~y_z-1.2",
	} {
		require.Equal(t, want, copySource("bucket", key), key)
	}
}
