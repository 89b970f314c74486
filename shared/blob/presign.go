package blob

import (
	"context"
	"fmt"
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
	if ttl <= 0 {
		return "", fmt.Errorf("presign object %q: ttl must be positive, got %s", key, ttl)
	}
	if ttl > MaxPresignTTL {
		return "", fmt.Errorf("presign object %q: ttl %s exceeds the %s limit: presigned URLs must be short-lived", key, ttl, MaxPresignTTL)
	}
	req, err := s.presign.PresignGetObject(ctx, &s3.GetObjectInput{
		Bucket: aws.String(s.bucket),
		Key:    aws.String(key),
	}, s3.WithPresignExpires(ttl))
	if err != nil {
		return "", fmt.Errorf("presign object %q: %w", key, err)
	}
	return req.URL, nil
}
