package blob

import (
	"context"
	"fmt"
	"mime"
	"slices"
	"time"

	"github.com/aws/aws-sdk-go-v2/aws"
	"github.com/aws/aws-sdk-go-v2/service/s3"
)

// MaxPresignTTL is the longest lifetime [Store.PresignGet] grants. Presigned
// URLs are bearer credentials: they are handed to API clients for one
// download, never stored in rows or events.
const MaxPresignTTL = time.Hour

// PresignGet returns a URL that downloads the object under key with a plain
// HTTP GET until ttl has passed. It refuses a ttl that is not positive or
// exceeds [MaxPresignTTL]. It signs locally and does not check that the
// object exists. With temporary credentials (a role from the default chain)
// the URL also stops working when they expire. Never log the URL.
func (s *Store) PresignGet(ctx context.Context, key string, ttl time.Duration) (string, error) {
	return s.presignGet(ctx, &s3.GetObjectInput{Bucket: aws.String(s.bucket), Key: aws.String(key)}, ttl)
}

// DownloadTypes are the content types a download is served as; any other
// is served as application/octet-stream, so a browser never renders a
// stored object (an SVG, an HTML page) in our storage's origin.
var DownloadTypes = []string{
	"video/mp4", "video/quicktime", "video/webm", "video/x-matroska", "video/mp2t",
	"audio/mpeg", "audio/mp4", "audio/aac", "audio/wav", "audio/flac", "audio/ogg",
	"image/png", "image/jpeg", "image/webp",
}

// Download is how a presigned download is served: always as an
// attachment named Filename, as ContentType when it is one of
// [DownloadTypes].
type Download struct {
	Filename    string
	ContentType string
}

// PresignDownload is [Store.PresignGet] for a URL handed to a client: the
// storage server answers with Content-Disposition: attachment and a
// content type from [DownloadTypes], whatever the object was stored with.
func (s *Store) PresignDownload(ctx context.Context, key string, ttl time.Duration, d Download) (string, error) {
	return s.presignGet(ctx, &s3.GetObjectInput{Bucket: aws.String(s.bucket), Key: aws.String(key),
		ResponseContentDisposition: aws.String(d.disposition()), ResponseContentType: aws.String(d.contentType())}, ttl)
}

func (d Download) disposition() string {
	if d.Filename == "" {
		return "attachment"
	}
	// FormatMediaType quotes the name, or encodes it per RFC 2231 when
	// it is not plain ASCII; it gives "" for a name it cannot encode.
	if v := mime.FormatMediaType("attachment", map[string]string{"filename": d.Filename}); v != "" {
		return v
	}
	return "attachment"
}

func (d Download) contentType() string {
	mt, _, err := mime.ParseMediaType(d.ContentType)
	if err != nil || !slices.Contains(DownloadTypes, mt) {
		return "application/octet-stream"
	}
	return mt
}

func (s *Store) presignGet(ctx context.Context, in *s3.GetObjectInput, ttl time.Duration) (string, error) {
	key := aws.ToString(in.Key)
	if ttl <= 0 {
		return "", fmt.Errorf("presign object %q: ttl must be positive, got %s", key, ttl)
	}
	if ttl > MaxPresignTTL {
		return "", fmt.Errorf("presign object %q: ttl %s exceeds the %s limit: presigned URLs must be short-lived", key, ttl, MaxPresignTTL)
	}
	req, err := s.presign.PresignGetObject(ctx, in, s3.WithPresignExpires(ttl))
	if err != nil {
		return "", fmt.Errorf("presign object %q: %w", key, err)
	}
	return req.URL, nil
}
