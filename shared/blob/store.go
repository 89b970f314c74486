package blob

import (
	"context"
	"errors"
	"fmt"
	"net"
	"net/http"
	"net/url"
	"strings"
	"time"

	"github.com/aws/aws-sdk-go-v2/aws"
	"github.com/aws/aws-sdk-go-v2/aws/retry"
	awshttp "github.com/aws/aws-sdk-go-v2/aws/transport/http"
	awsconfig "github.com/aws/aws-sdk-go-v2/config"
	"github.com/aws/aws-sdk-go-v2/credentials"
	"github.com/aws/aws-sdk-go-v2/feature/s3/transfermanager"
	"github.com/aws/aws-sdk-go-v2/service/s3"
	"github.com/aws/aws-sdk-go-v2/service/s3/types"
	"github.com/aws/smithy-go"
	"go.opentelemetry.io/contrib/instrumentation/net/http/otelhttp"

	"github.com/aivedio/pipeline/shared/config"
)

// ErrNotFound reports that no object exists under the key (or, for a HEAD
// request, that the bucket is missing too: S3 does not tell them apart there).
var ErrNotFound = errors.New("object not found")

const (
	// PartSize is the size of the parts a multipart upload sends, and the most
	// Put reads ahead before it knows whether one PutObject suffices. With S3's
	// 10,000-part limit it caps a body of unknown length at about 78 GiB; give
	// [PutOpts.Size] for larger bodies and the parts grow to fit.
	PartSize = 8 << 20

	// uploadConcurrency bounds the parts of one Put in flight at a time.
	uploadConcurrency = 4

	// defaultRegion is used when the configuration names none.
	defaultRegion = "us-east-1"

	// maxAttempts bounds the tries of one S3 request (first try included);
	// the standard retryer backs off with jitter between them and retries
	// throttling, 5xx and connection errors only.
	maxAttempts = 5
	maxBackoff  = 10 * time.Second

	// abortTimeout bounds aborting a failed multipart upload, which runs on a
	// fresh context so that it also happens when the caller's was canceled.
	abortTimeout = 30 * time.Second
)

// Store reads and writes the objects of one bucket. It is safe for
// concurrent use.
type Store struct {
	client   *s3.Client
	presign  *s3.PresignClient
	transfer *transfermanager.Client
	bucket   string
	region   string
}

// New builds a Store for cfg.Bucket. It uses cfg's static credentials when
// given and the AWS default credential chain otherwise; a custom endpoint
// (an S3-compatible server) is addressed path-style. New makes no request:
// call [Store.EnsureBucket] to check or create the bucket.
func New(ctx context.Context, cfg config.S3) (*Store, error) {
	if err := cfg.Validate(); err != nil {
		return nil, fmt.Errorf("s3 configuration: %w", err)
	}
	region := cfg.Region
	if region == "" {
		region = defaultRegion
	}
	loadOpts := []func(*awsconfig.LoadOptions) error{
		awsconfig.WithRegion(region),
		awsconfig.WithRetryer(func() aws.Retryer {
			return retry.NewStandard(func(o *retry.StandardOptions) {
				o.MaxAttempts = maxAttempts
				o.MaxBackoff = maxBackoff
			})
		}),
		awsconfig.WithHTTPClient(awshttp.NewBuildableClient().
			WithDialerOptions(func(d *net.Dialer) { d.Timeout = 10 * time.Second }).
			WithTransportOptions(func(t *http.Transport) {
				t.TLSHandshakeTimeout = 10 * time.Second
				// Parallel part uploads and downloads share one host.
				t.MaxIdleConnsPerHost = 64
			})),
	}
	if cfg.AccessKeyID != "" {
		loadOpts = append(loadOpts, awsconfig.WithCredentialsProvider(
			credentials.NewStaticCredentialsProvider(cfg.AccessKeyID, cfg.SecretAccessKey, "")))
	}
	awsCfg, err := awsconfig.LoadDefaultConfig(ctx, loadOpts...)
	if err != nil {
		return nil, fmt.Errorf("load aws configuration: %w", err)
	}
	// Every S3 request (each part of a multipart transfer too) is a client
	// span of the caller's. Wrapped after loading: the SDK adds a custom CA
	// bundle only to its own client type.
	awsCfg.HTTPClient = tracedHTTPClient(awsCfg.HTTPClient)
	client := s3.NewFromConfig(awsCfg, func(o *s3.Options) {
		// A GET of a multipart object has only a composite checksum the SDK
		// cannot verify; it says so on stderr for every download otherwise.
		o.DisableLogOutputChecksumValidationSkipped = true
		if cfg.Endpoint != "" {
			o.BaseEndpoint = aws.String(cfg.Endpoint)
			o.UsePathStyle = true
		}
	})
	return &Store{
		client:  client,
		presign: s3.NewPresignClient(client),
		transfer: transfermanager.New(client, func(o *transfermanager.Options) {
			o.PartSizeBytes = PartSize
			o.MultipartUploadThreshold = PartSize
			o.Concurrency = uploadConcurrency
			o.FailTimeout = abortTimeout
		}),
		bucket: cfg.Bucket,
		region: region,
	}, nil
}

// Bucket returns the name of the bucket the Store works in.
func (s *Store) Bucket() string { return s.bucket }

// EnsureBucket creates the Store's bucket unless it exists already. It is
// idempotent: a bucket this account owns is success. It asks HeadBucket
// first, so a deployment whose role may not create buckets still passes when
// the bucket is there.
func (s *Store) EnsureBucket(ctx context.Context) error {
	_, err := s.client.HeadBucket(ctx, &s3.HeadBucketInput{Bucket: aws.String(s.bucket)})
	if err == nil {
		return nil
	}
	if !isNotFound(err) {
		return fmt.Errorf("check bucket %q: %w", s.bucket, err)
	}
	in := &s3.CreateBucketInput{Bucket: aws.String(s.bucket)}
	if s.region != defaultRegion {
		// us-east-1 is the one region S3 refuses as a location constraint.
		in.CreateBucketConfiguration = &types.CreateBucketConfiguration{
			LocationConstraint: types.BucketLocationConstraint(s.region),
		}
	}
	_, err = s.client.CreateBucket(ctx, in)
	var owned *types.BucketAlreadyOwnedByYou
	if err != nil && !errors.As(err, &owned) {
		return fmt.Errorf("create bucket %q: %w", s.bucket, err)
	}
	return nil
}

// Delete removes the object under key. Deleting a missing object is success,
// so Delete may be repeated.
func (s *Store) Delete(ctx context.Context, key string) error {
	_, err := s.client.DeleteObject(ctx, &s3.DeleteObjectInput{
		Bucket: aws.String(s.bucket),
		Key:    aws.String(key),
	})
	if err != nil && !isNotFound(err) {
		return fmt.Errorf("delete object %q: %w", key, err)
	}
	return nil
}

// isNotFound reports whether err is S3's answer for a missing key (GET:
// NoSuchKey) or a missing object or bucket (HEAD: a bare 404, NotFound).
func isNotFound(err error) bool {
	var noSuchKey *types.NoSuchKey
	var notFound *types.NotFound
	if errors.As(err, &noSuchKey) || errors.As(err, &notFound) {
		return true
	}
	var apiErr smithy.APIError
	if errors.As(err, &apiErr) {
		switch apiErr.ErrorCode() {
		case "NoSuchKey", "NotFound":
			return true
		}
	}
	return false
}

// List returns the keys of the objects under prefix, in key order.
func (s *Store) List(ctx context.Context, prefix string) ([]string, error) {
	var keys []string
	pages := s3.NewListObjectsV2Paginator(s.client, &s3.ListObjectsV2Input{Bucket: aws.String(s.bucket), Prefix: aws.String(prefix)})
	for pages.HasMorePages() {
		page, err := pages.NextPage(ctx)
		if err != nil {
			return nil, fmt.Errorf("list objects under %q: %w", prefix, err)
		}
		for _, o := range page.Contents {
			keys = append(keys, aws.ToString(o.Key))
		}
	}
	return keys, nil
}

// tracedHTTPClient sends the SDK's requests through base in otelhttp's
// client spans, named "s3 <method>".
func tracedHTTPClient(base aws.HTTPClient) aws.HTTPClient {
	return tracedClient{otelhttp.NewTransport(roundTripper(base.Do),
		otelhttp.WithSpanNameFormatter(func(_ string, r *http.Request) string { return "s3 " + r.Method }))}
}

type tracedClient struct{ transport http.RoundTripper }

func (c tracedClient) Do(r *http.Request) (*http.Response, error) { return c.transport.RoundTrip(r) }

// roundTripper makes a Do function a transport: base's own client makes
// the request, with its dialer, TLS and pool settings.
type roundTripper func(*http.Request) (*http.Response, error)

func (f roundTripper) RoundTrip(r *http.Request) (*http.Response, error) { return f(r) }

// ErrChanged: the source of a [Store.Copy] is no longer the object the
// caller checked (its ETag moved).
var ErrChanged = errors.New("object changed since it was checked")

// Copy copies the object under from to to, on the server, when from still
// has etag ("" copies whatever is there): a copy made after a check copies
// the bytes checked or nothing ([ErrChanged]). Metadata is copied with it.
// A missing source is [ErrNotFound]. One request: at most 5 GiB.
func (s *Store) Copy(ctx context.Context, from, to, etag string) error {
	segments := strings.Split(from, "/")
	for i, seg := range segments {
		segments[i] = url.PathEscape(seg)
	}
	in := &s3.CopyObjectInput{Bucket: aws.String(s.bucket), Key: aws.String(to),
		CopySource: aws.String(s.bucket + "/" + strings.Join(segments, "/")), MetadataDirective: types.MetadataDirectiveCopy}
	if etag != "" {
		in.CopySourceIfMatch = aws.String(etag)
	}
	if _, err := s.client.CopyObject(ctx, in); err != nil {
		var apiErr smithy.APIError
		switch {
		case isNotFound(err):
			return fmt.Errorf("copy object %q to %q: %w", from, to, ErrNotFound)
		case errors.As(err, &apiErr) && apiErr.ErrorCode() == "PreconditionFailed":
			return fmt.Errorf("copy object %q to %q: %w", from, to, ErrChanged)
		}
		return fmt.Errorf("copy object %q to %q: %w", from, to, err)
	}
	return nil
}
