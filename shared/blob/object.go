package blob

import (
	"context"
	"encoding/base64"
	"encoding/hex"
	"fmt"
	"io"
	"strings"

	"github.com/aws/aws-sdk-go-v2/aws"
	"github.com/aws/aws-sdk-go-v2/service/s3"
	"github.com/aws/aws-sdk-go-v2/service/s3/types"
)

// metaSHA256 is the user-metadata name (x-amz-meta-sha256) under which Put
// records the hex sha256 of the whole body.
const metaSHA256 = "sha256"

// Object describes a stored object.
type Object struct {
	// Key is the object's key in the Store's bucket.
	Key string
	// Size is the body length in bytes.
	Size int64
	// SHA256 is the lower-case hex sha256 of the whole body. Put always sets
	// it; Stat and Open report it from the object's metadata, or from a
	// full-object SHA256 checksum the server computed, and leave it empty
	// when the object has neither (see the package doc).
	SHA256 string
	// ContentType is the media type the object is served with.
	ContentType string
	// ETag is the server's entity tag, quotes included. For multipart
	// uploads S3 gives the form "<hex>-<parts>"; it is not a digest of the
	// body.
	ETag string
	// Parts is how many parts Put uploaded: 0 when one PutObject sufficed.
	// Stat and Open leave it 0.
	Parts int
}

// Stat describes the object under key without reading its body. A missing
// object is [ErrNotFound].
func (s *Store) Stat(ctx context.Context, key string) (Object, error) {
	out, err := s.head(ctx, key)
	if err != nil {
		return Object{}, err
	}
	return Object{
		Key:         key,
		Size:        aws.ToInt64(out.ContentLength),
		SHA256:      storedSHA256(out.Metadata, out.ChecksumSHA256, out.ChecksumType),
		ContentType: aws.ToString(out.ContentType),
		ETag:        aws.ToString(out.ETag),
	}, nil
}

// head asks for the object's headers, checksums included.
func (s *Store) head(ctx context.Context, key string) (*s3.HeadObjectOutput, error) {
	out, err := s.client.HeadObject(ctx, &s3.HeadObjectInput{
		Bucket:       aws.String(s.bucket),
		Key:          aws.String(key),
		ChecksumMode: types.ChecksumModeEnabled,
	})
	if err != nil {
		if isNotFound(err) {
			return nil, fmt.Errorf("stat object %q: %w", key, ErrNotFound)
		}
		return nil, fmt.Errorf("stat object %q: %w", key, err)
	}
	return out, nil
}

// Open streams the body of the object under key. The caller must close the
// body; ctx must stay live until it has. A missing object is [ErrNotFound].
// The SDK verifies a full-object checksum the server returns once the body
// has been read to its end.
func (s *Store) Open(ctx context.Context, key string) (io.ReadCloser, Object, error) {
	out, err := s.client.GetObject(ctx, &s3.GetObjectInput{
		Bucket:       aws.String(s.bucket),
		Key:          aws.String(key),
		ChecksumMode: types.ChecksumModeEnabled,
	})
	if err != nil {
		if isNotFound(err) {
			return nil, Object{}, fmt.Errorf("open object %q: %w", key, ErrNotFound)
		}
		return nil, Object{}, fmt.Errorf("open object %q: %w", key, err)
	}
	return out.Body, Object{
		Key:         key,
		Size:        aws.ToInt64(out.ContentLength),
		SHA256:      storedSHA256(out.Metadata, out.ChecksumSHA256, out.ChecksumType),
		ContentType: aws.ToString(out.ContentType),
		ETag:        aws.ToString(out.ETag),
	}, nil
}

// storedSHA256 returns the whole-body sha256 an object carries: the metadata
// Put recorded, else a full-object SHA256 checksum of the server (never a
// COMPOSITE one, which digests part digests), else "".
func storedSHA256(meta map[string]string, checksum *string, typ types.ChecksumType) string {
	for k, v := range meta {
		if strings.EqualFold(k, metaSHA256) && isHexSHA256(v) {
			return strings.ToLower(v)
		}
	}
	if sum, ok := fullObjectSHA256(checksum, typ); ok {
		return sum
	}
	return ""
}

// fullObjectSHA256 decodes a server's SHA256 checksum into hex when it covers
// the whole object: a checksum of no type is a header a stand-in echoed
// back unverified, not the server's.
func fullObjectSHA256(checksum *string, typ types.ChecksumType) (string, bool) {
	v := aws.ToString(checksum)
	if v == "" || typ != types.ChecksumTypeFullObject || strings.Contains(v, "-") {
		return "", false
	}
	raw, err := base64.StdEncoding.DecodeString(v)
	if err != nil || len(raw) != 32 {
		return "", false
	}
	return hex.EncodeToString(raw), true
}

func isHexSHA256(v string) bool {
	raw, err := hex.DecodeString(v)
	return err == nil && len(raw) == 32
}
