package blob

import (
	"net/http/httptest"
	"slices"
	"testing"

	"github.com/johannesboyne/gofakes3"
	"github.com/johannesboyne/gofakes3/backend/s3mem"

	"github.com/aivedio/pipeline/local/embedded"
	"github.com/aivedio/pipeline/shared/config"
)

// backend is one S3 server the conformance suite runs against. Every test
// that talks to S3 runs once per backend, as a subtest named after it.
type backend struct {
	name string
	// config returns the S3 block of a server for one test, bucket aside, or
	// skips (fails under `make test`) when there is none.
	config func(t *testing.T) config.S3
	// missing lists the S3 behaviours the server does not implement.
	missing []feature
}

// backends are the real S3 server that `make test` starts, the in-process
// gofakes3, and the same with its objects in files, which `go run ./local`
// falls back to: all run the suite.
var backends = []backend{
	{name: "s3", config: testConfig},
	{
		name:   "gofakes3",
		config: gofakes3Config,
		// gofakes3 v1.2.0 stores every x-amz-* request header as object
		// metadata and echoes it back: a checksum header is neither
		// verified nor given a type. s3mem merges the metadata of the
		// object a write replaces into the new one, so a multipart upload
		// (which sends no checksum) over a single-part object inherits
		// that object's x-amz-checksum-sha256 and fails every verifying
		// GET. CopyObject reads only x-amz-copy-source, and s3mem answers
		// every CreateBucket of an existing bucket with
		// BucketAlreadyExists. The multipart uploader registers a bucket at
		// its first upload and answers a listing before that with
		// NoSuchUpload.
		missing: []feature{serverChecksum, replaceMetadata, copyIfMatch, alreadyOwnedByYou, listNoUploads},
	},
	{
		name:   "gofakes3-files",
		config: embeddedS3Config,
		// s3mem under a write-through to files: what s3mem lacks.
		missing: []feature{serverChecksum, replaceMetadata, copyIfMatch, alreadyOwnedByYou, listNoUploads},
	},
}

// feature is an S3 behaviour the suite relies on that a stand-in may lack.
// A test that needs a missing one skips on that backend, naming it; only
// listNoUploads is worked around instead, in testBundle.list, because the
// answer gofakes3 gives still says that no upload is pending.
type feature string

const (
	serverChecksum    feature = "server-side checksums: PutObject verifying x-amz-checksum-sha256 and HeadObject reporting it as a FULL_OBJECT checksum"
	replaceMetadata   feature = "overwrites that replace metadata: a new object under a key keeping none of the old one's, x-amz-checksum-sha256 included"
	copyIfMatch       feature = "conditional copy: CopyObject honouring x-amz-copy-source-if-match"
	alreadyOwnedByYou feature = "BucketAlreadyOwnedByYou: CreateBucket of a bucket the caller already owns"
	listNoUploads     feature = "ListMultipartUploads on a bucket that never had a multipart upload"
)

// lacks reports whether the server does not implement f.
func (b backend) lacks(f feature) bool {
	return slices.Contains(b.missing, f)
}

// need skips t when the server does not implement f.
func (b backend) need(t *testing.T, f feature) {
	t.Helper()
	if b.lacks(f) {
		t.Skipf("%s lacks %s", b.name, f)
	}
}

// embeddedS3Config starts the S3 server of `go run ./local`, its objects in
// files, for one test.
func embeddedS3Config(t *testing.T) config.S3 {
	t.Helper()
	dir := t.TempDir()
	h, err := embedded.S3Handler(dir)
	if err != nil {
		t.Fatal(err)
	}
	srv := httptest.NewServer(h)
	t.Cleanup(srv.Close)
	return config.S3{
		Endpoint:        srv.URL,
		Region:          "us-east-1",
		AccessKeyID:     "gofakes3",
		SecretAccessKey: "gofakes3",
	}
}

// gofakes3Config starts an in-memory gofakes3 server for one test and stops
// it in t.Cleanup. It accepts any credentials.
func gofakes3Config(t *testing.T) config.S3 {
	t.Helper()
	srv := httptest.NewServer(gofakes3.New(s3mem.New()).Server())
	t.Cleanup(srv.Close)
	return config.S3{
		Endpoint:        srv.URL,
		Region:          "us-east-1",
		AccessKeyID:     "gofakes3",
		SecretAccessKey: "gofakes3",
	}
}
