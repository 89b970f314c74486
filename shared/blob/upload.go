package blob

import (
	"context"
	"crypto/sha256"
	"encoding/base64"
	"encoding/hex"
	"fmt"
	"io"
	"net/http"
	"time"

	"github.com/aws/aws-sdk-go-v2/aws"
	"github.com/aws/aws-sdk-go-v2/service/s3"
)

// AssetKey returns the object key of a file a tenant uploads as an asset:
//
//	tenants/<tenantID>/assets/<assetID>/<name>
//
// with the same component rules as [Key]. The client's file name is not
// part of it: the key is ours, the name is only shown back.
func AssetKey(tenantID, assetID, name string) (string, error) {
	for _, c := range []struct{ field, value string }{
		{"tenant id", tenantID},
		{"asset id", assetID},
		{"name", name},
	} {
		if err := checkComponent(c.value); err != nil {
			return "", fmt.Errorf("object key %s %q: %w", c.field, c.value, err)
		}
	}
	return "tenants/" + tenantID + "/assets/" + assetID + "/" + name, nil
}

// UploadSpec is what a presigned upload commits the client to.
type UploadSpec struct {
	ContentType string
	Size        int64
	// SHA256 is the lower-case hex sha256 of the whole body. The server
	// checks the body against it (x-amz-checksum-sha256) and keeps it as
	// the object's full-object checksum, which [Store.Stat] reports.
	SHA256 string
}

// Upload is a presigned single-request upload: the client sends the body
// with Method to URL, with every header in Headers, before ExpiresAt.
type Upload struct {
	Method    string
	URL       string
	Headers   map[string]string
	ExpiresAt time.Time
}

// MaxSingleUpload is the largest object one presigned PUT may carry (S3's
// single-request limit).
const MaxSingleUpload = 5 << 30

// PresignPut returns an upload of one object under key that the server
// accepts only with the content type, length and sha256 of spec: the
// signature covers them, so the URL cannot be used for another body. The
// ttl rules of [Store.PresignGet] apply. Never log the URL.
func (s *Store) PresignPut(ctx context.Context, key string, spec UploadSpec, ttl time.Duration) (Upload, error) {
	if ttl <= 0 || ttl > MaxPresignTTL {
		return Upload{}, fmt.Errorf("presign upload %q: ttl must be in (0, %s], got %s", key, MaxPresignTTL, ttl)
	}
	sum, err := hex.DecodeString(spec.SHA256)
	if err != nil || len(sum) != 32 {
		return Upload{}, fmt.Errorf("presign upload %q: sha256 %q is not 64 hex digits", key, spec.SHA256)
	}
	if spec.Size < 0 || spec.Size > MaxSingleUpload {
		return Upload{}, fmt.Errorf("presign upload %q: size %d is outside 0..%d", key, spec.Size, int64(MaxSingleUpload))
	}
	checksum := base64.StdEncoding.EncodeToString(sum)
	req, err := s.presign.PresignPutObject(ctx, &s3.PutObjectInput{
		Bucket:         aws.String(s.bucket),
		Key:            aws.String(key),
		ContentType:    aws.String(spec.ContentType),
		ContentLength:  aws.Int64(spec.Size),
		ChecksumSHA256: aws.String(checksum),
	}, s3.WithPresignExpires(ttl))
	if err != nil {
		return Upload{}, fmt.Errorf("presign upload %q: %w", key, err)
	}
	headers := map[string]string{}
	for name, values := range req.SignedHeader {
		if len(values) == 0 || http.CanonicalHeaderKey(name) == "Host" {
			continue
		}
		headers[http.CanonicalHeaderKey(name)] = values[0]
	}
	return Upload{Method: req.Method, URL: req.URL, Headers: headers, ExpiresAt: time.Now().Add(ttl).UTC()}, nil
}

// ServerSHA256 is the sha256 the storage server itself keeps for the
// object under key: its full-object checksum, which it checked against the
// body on upload. It is "" when the server keeps none (a stand-in that
// does not verify, a multipart upload's composite checksum); metadata a
// writer recorded never counts. A missing object is [ErrNotFound].
func (s *Store) ServerSHA256(ctx context.Context, key string) (string, error) {
	out, err := s.head(ctx, key)
	if err != nil {
		return "", err
	}
	sum, _ := fullObjectSHA256(out.ChecksumSHA256, out.ChecksumType)
	return sum, nil
}

// ReadSHA256 reads the object under key back and returns the sha256 of
// the bytes it holds. No checksum the object carries is trusted, nor
// checked by the SDK on the way: one a stand-in server merely echoed from
// the upload's headers would fail the read instead of showing that the
// bytes differ. A missing object is [ErrNotFound].
func (s *Store) ReadSHA256(ctx context.Context, key string) (string, error) {
	out, err := s.client.GetObject(ctx, &s3.GetObjectInput{Bucket: aws.String(s.bucket), Key: aws.String(key)},
		func(o *s3.Options) { o.ResponseChecksumValidation = aws.ResponseChecksumValidationWhenRequired })
	if err != nil {
		if isNotFound(err) {
			return "", fmt.Errorf("read object %q: %w", key, ErrNotFound)
		}
		return "", fmt.Errorf("read object %q: %w", key, err)
	}
	defer out.Body.Close()
	h := sha256.New()
	if _, err := io.Copy(h, out.Body); err != nil {
		return "", fmt.Errorf("read object %q: %w", key, err)
	}
	return hex.EncodeToString(h.Sum(nil)), nil
}
