package blob

import (
	"bytes"
	"context"
	"crypto/sha256"
	"encoding/base64"
	"encoding/hex"
	"errors"
	"fmt"
	"io"
	"strings"

	"github.com/aws/aws-sdk-go-v2/aws"
	"github.com/aws/aws-sdk-go-v2/feature/s3/transfermanager"
	"github.com/aws/aws-sdk-go-v2/service/s3"
	"github.com/aws/aws-sdk-go-v2/service/s3/types"
	"github.com/aws/smithy-go"
)

const (
	defaultContentType = "application/octet-stream"

	// maxCopySize is the largest object one CopyObject request may copy, and
	// so the largest whose sha256 Put can attach as metadata afterwards.
	maxCopySize = 5 << 30

	// firstReadSize is the buffer Put starts reading ahead with; it doubles
	// up to PartSize, so small bodies stay small in memory.
	firstReadSize = 64 << 10
)

// PutOpts are the optional knobs of [Store.Put]. A nil *PutOpts means all
// defaults.
type PutOpts struct {
	// ContentType is the media type the object is served with;
	// "application/octet-stream" when empty.
	ContentType string
	// Size, when positive, is the length the body must have (for example a
	// provider's Content-Length). A body of another length fails the Put and
	// leaves no new object. It also lets bodies over ~78 GiB use larger parts.
	Size int64
}

// Put stores the body read from r under key, replacing any object there, and
// describes what it stored. It streams: r is read in pieces of at most
// [PartSize] bytes and is never held in memory whole. Bodies up to
// [PartSize] go up in one PutObject; larger ones in a multipart upload of
// [PartSize] parts with bounded concurrency. The sha256 and size are
// computed while streaming and recorded as described in the package doc.
//
// When reading r fails, the body has another length than opts.Size, or ctx
// ends while uploading, Put returns an error and the multipart upload is
// aborted; an object stored earlier under key stays untouched. When only the
// final step of a multipart Put fails (attaching the digest), the new bytes
// are in place without it and Put returns an error all the same. Either way
// the remedy is to repeat the Put, which is safe.
func (s *Store) Put(ctx context.Context, key string, r io.Reader, opts *PutOpts) (Object, error) {
	var o PutOpts
	if opts != nil {
		o = *opts
	}
	if o.ContentType == "" {
		o.ContentType = defaultContentType
	}
	if key == "" {
		return Object{}, errors.New("put object: key must not be empty")
	}
	if o.Size < 0 {
		return Object{}, fmt.Errorf("put object %q: size must not be negative, got %d", key, o.Size)
	}
	body := &digestReader{r: r, hash: sha256.New(), want: o.Size}
	head, err := readHead(body, PartSize)
	switch {
	case errors.Is(err, io.EOF):
		return s.putSingle(ctx, key, head, body, o)
	case err != nil:
		return Object{}, fmt.Errorf("put object %q: read body: %w", key, err)
	}
	return s.putMultipart(ctx, key, io.MultiReader(bytes.NewReader(head), body), body, o)
}

// putSingle stores a body that was read whole (it is at most PartSize long)
// in one PutObject that carries its sha256 both as metadata and as a checksum
// the server verifies.
func (s *Store) putSingle(ctx context.Context, key string, data []byte, body *digestReader, o PutOpts) (Object, error) {
	sum := body.sum()
	out, err := s.client.PutObject(ctx, &s3.PutObjectInput{
		Bucket:            aws.String(s.bucket),
		Key:               aws.String(key),
		Body:              bytes.NewReader(data),
		ContentLength:     aws.Int64(int64(len(data))),
		ContentType:       aws.String(o.ContentType),
		Metadata:          map[string]string{metaSHA256: hex.EncodeToString(sum)},
		ChecksumAlgorithm: types.ChecksumAlgorithmSha256,
		ChecksumSHA256:    aws.String(base64.StdEncoding.EncodeToString(sum)),
	})
	if err != nil {
		return Object{}, fmt.Errorf("put object %q: %w", key, err)
	}
	return Object{
		Key:         key,
		Size:        body.n,
		SHA256:      hex.EncodeToString(sum),
		ContentType: o.ContentType,
		ETag:        aws.ToString(out.ETag),
	}, nil
}

// putMultipart streams a body longer than PartSize through the transfer
// manager, then records the sha256 it computed on the way.
func (s *Store) putMultipart(ctx context.Context, key string, r io.Reader, body *digestReader, o PutOpts) (Object, error) {
	in := &transfermanager.UploadObjectInput{
		Bucket:      aws.String(s.bucket),
		Key:         aws.String(key),
		Body:        r,
		ContentType: aws.String(o.ContentType),
	}
	if o.Size > 0 {
		// The server then also checks the total (MpuObjectSize).
		in.ContentLength = aws.Int64(o.Size)
	}
	out, err := s.transfer.UploadObject(ctx, in)
	if err != nil {
		return Object{}, fmt.Errorf("put object %q: multipart upload: %w", key, err)
	}
	obj := Object{
		Key:         key,
		Size:        body.n,
		SHA256:      hex.EncodeToString(body.sum()),
		ContentType: o.ContentType,
		ETag:        aws.ToString(out.ETag),
		Parts:       len(out.CompletedParts),
	}
	if obj.Size > maxCopySize {
		return obj, nil
	}
	etag, err := s.recordSHA256(ctx, obj)
	if err != nil {
		return Object{}, fmt.Errorf("put object %q: %w", key, err)
	}
	obj.ETag = etag
	return obj, nil
}

// recordSHA256 attaches obj.SHA256 as metadata to the object just uploaded
// by copying it onto itself, and returns the object's ETag afterwards. The
// copy only happens while the object still has the upload's ETag, so a
// concurrent Put's bytes are never labelled with this Put's digest.
//
// The copy deliberately asks for no new server checksum (ChecksumAlgorithm):
// versitygw v1.8.0 answers an in-place copy with a new algorithm by storing
// the checksum of zero bytes as the object's full-object checksum, which
// would then fail every checksum-validating GET.
func (s *Store) recordSHA256(ctx context.Context, obj Object) (string, error) {
	out, err := s.client.CopyObject(ctx, &s3.CopyObjectInput{
		Bucket:            aws.String(s.bucket),
		Key:               aws.String(obj.Key),
		CopySource:        aws.String(copySource(s.bucket, obj.Key)),
		CopySourceIfMatch: aws.String(obj.ETag),
		MetadataDirective: types.MetadataDirectiveReplace,
		Metadata:          map[string]string{metaSHA256: obj.SHA256},
		ContentType:       aws.String(obj.ContentType),
	})
	if err != nil {
		var apiErr smithy.APIError
		if errors.As(err, &apiErr) && apiErr.ErrorCode() == "PreconditionFailed" {
			return "", fmt.Errorf("record sha256: a concurrent write replaced the object: %w", err)
		}
		return "", fmt.Errorf("record sha256: %w", err)
	}
	if out.CopyObjectResult != nil && aws.ToString(out.CopyObjectResult.ETag) != "" {
		// AWS S3 gives the copy a new ETag; versitygw keeps the upload's.
		return aws.ToString(out.CopyObjectResult.ETag), nil
	}
	return obj.ETag, nil
}

// copySource is the URL-encoded "bucket/key" that CopyObject expects. It
// escapes every byte but unreserved ones and "/", stricter than
// url.PathEscape: servers differ on whether a literal "+" means a space.
func copySource(bucket, key string) string {
	const hexDigits = "0123456789ABCDEF"
	var b strings.Builder
	b.WriteString(bucket)
	b.WriteByte('/')
	for i := range len(key) {
		c := key[i]
		switch {
		case 'a' <= c && c <= 'z', 'A' <= c && c <= 'Z', '0' <= c && c <= '9',
			c == '-', c == '.', c == '_', c == '~', c == '/':
			b.WriteByte(c)
		default:
			b.WriteByte('%')
			b.WriteByte(hexDigits[c>>4])
			b.WriteByte(hexDigits[c&0xf])
		}
	}
	return b.String()
}
