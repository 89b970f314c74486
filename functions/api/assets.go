package api

import (
	"context"
	"crypto/sha256"
	"encoding/hex"
	"encoding/json"
	"errors"
	"fmt"
	"log/slog"
	"mime"
	"net/http"
	"slices"
	"strconv"
	"strings"
	"time"
	"unicode"
	"unicode/utf8"

	"github.com/google/uuid"
	"github.com/jackc/pgx/v5"

	"github.com/aivedio/pipeline/shared/aggregate"
	"github.com/aivedio/pipeline/shared/asset"
	"github.com/aivedio/pipeline/shared/blob"
	"github.com/aivedio/pipeline/shared/catalog"
	"github.com/aivedio/pipeline/shared/outbox"
	"github.com/aivedio/pipeline/shared/task"
	"github.com/aivedio/pipeline/shared/tenant"
)

// UploadStore takes the files tenants upload; *blob.Store is one.
type UploadStore interface {
	PresignPut(ctx context.Context, key string, spec blob.UploadSpec, ttl time.Duration) (blob.Upload, error)
	Stat(ctx context.Context, key string) (blob.Object, error)
	ServerSHA256(ctx context.Context, key string) (string, error)
	ReadSHA256(ctx context.Context, key string) (string, error)
	Copy(ctx context.Context, from, to, etag string) error
	Delete(ctx context.Context, key string) error
}

// Limits of the Asset API that are part of the API, not configuration.
const (
	MaxFilenameChars = 255
	DefaultPageSize  = 20
	MaxPageSize      = 100
	// uploadObjectName is the name of an upload's object within its
	// asset's prefix: the client's file name is shown back, never used in
	// a key.
	uploadObjectName = "original"
	// sourceObjectName is where complete copies a checked upload: the
	// upload URL writes only to uploadObjectName, so nothing a client PUTs
	// after complete reaches the bytes that were checked and probed.
	sourceObjectName = "source"
	// hashTimeout bounds reading a whole upload back to check its sha256,
	// when the storage server kept no checksum of its own: within the API
	// server's write timeout (60 s), so the client gets an answer.
	hashTimeout = 45 * time.Second
)

// assetBody is the JSON body of POST /v1/assets as sent.
type assetBody struct {
	Kind        string `json:"kind"`
	ContentType string `json:"content_type"`
	SizeBytes   int64  `json:"size_bytes"`
	SHA256      string `json:"sha256"`
	Filename    string `json:"filename"`
}

// mediaPrefixes are the content types each kind of upload may have.
var mediaPrefixes = map[asset.MediaType]string{asset.Video: "video/", asset.Audio: "audio/", asset.Image: "image/"}

// uploadTypes are the content types an upload may be announced as, per
// kind: the containers the probe takes (media.InputFormats).
var uploadTypes = map[asset.MediaType][]string{
	asset.Video: {"video/mp4", "video/quicktime", "video/x-matroska", "video/webm", "video/mp2t"},
	asset.Audio: {"audio/mpeg", "audio/mp4", "audio/aac", "audio/wav", "audio/x-wav", "audio/wave", "audio/flac", "audio/x-flac", "audio/ogg", "audio/opus", "audio/webm"},
	asset.Image: {"image/png", "image/jpeg", "image/webp"},
}

// uploadRequest is a validated upload announcement.
type uploadRequest struct {
	media       asset.MediaType
	contentType string
	size        int64
	sha256      []byte
	filename    string
}

func (s *Server) validateUpload(b assetBody) (uploadRequest, *apiError) {
	bad := func(format string, args ...any) (uploadRequest, *apiError) {
		return uploadRequest{}, errorf(http.StatusBadRequest, CodeInvalidField, format, args...)
	}
	media := asset.MediaType(b.Kind)
	prefix, ok := mediaPrefixes[media]
	if !ok {
		return bad("kind must be VIDEO, AUDIO or IMAGE, got %q", truncate(b.Kind, 32))
	}
	mt, _, err := mime.ParseMediaType(b.ContentType)
	if err != nil || !strings.HasPrefix(mt, prefix) {
		return bad("content_type must be a %s* media type for a %s upload (for example %s), got %q", prefix, media, exampleType[media], truncate(b.ContentType, 64))
	}
	switch {
	case mt == "image/svg+xml":
		return bad("content_type image/svg+xml is not accepted: an SVG is a document that can run scripts, not an image the pipeline renders; upload a PNG, JPEG or WebP")
	case !slices.Contains(uploadTypes[media], mt):
		return bad("content_type %s is not accepted for a %s upload; accepted: %s", mt, media, strings.Join(uploadTypes[media], ", "))
	}
	if b.SizeBytes < 1 || b.SizeBytes > s.limits.MaxUploadBytes {
		return bad("size_bytes must be from 1 to %d, got %d", s.limits.MaxUploadBytes, b.SizeBytes)
	}
	sum, err := hex.DecodeString(b.SHA256)
	if err != nil || len(sum) != sha256.Size {
		return bad("sha256 must be the file's SHA-256 as 64 hex digits (sha256sum prints it)")
	}
	name := strings.TrimSpace(b.Filename)
	switch {
	case name == "":
		return bad("filename is required: the name the file had on your side")
	case utf8.RuneCountInString(name) > MaxFilenameChars:
		return bad("filename is longer than %d characters", MaxFilenameChars)
	case strings.ContainsAny(name, `/\`) || strings.ContainsFunc(name, func(r rune) bool { return !unicode.IsPrint(r) }):
		return bad("filename must be a plain file name: no path separators, no control characters")
	}
	return uploadRequest{media: media, contentType: mt, size: b.SizeBytes, sha256: sum, filename: name}, nil
}

var exampleType = map[asset.MediaType]string{asset.Video: "video/mp4", asset.Audio: "audio/mpeg", asset.Image: "image/png"}

// hash is the SHA-256 of the announcement's canonical form.
func (u uploadRequest) hash() []byte {
	raw, _ := json.Marshal([]any{1, u.media, u.contentType, u.size, hex.EncodeToString(u.sha256), u.filename})
	sum := sha256.Sum256(raw)
	return sum[:]
}

// uploadView is the answer of POST /v1/assets.
type uploadView struct {
	AssetID uuid.UUID     `json:"asset_id"`
	Status  asset.Status  `json:"status"`
	Upload  *presignedPut `json:"upload,omitempty"`
}

type presignedPut struct {
	Method    string            `json:"method"`
	URL       string            `json:"url"`
	Headers   map[string]string `json:"headers"`
	ExpiresAt time.Time         `json:"expires_at"`
}

// createAsset serves POST /v1/assets: 201 with a presigned PUT for a new
// upload; for a repeat under the same Idempotency-Key, 200 with the same
// asset (and a fresh upload URL while it is still PENDING_UPLOAD).
func (s *Server) createAsset(w http.ResponseWriter, r *http.Request, p tenant.Principal) *apiError {
	if s.uploads == nil {
		return errorf(http.StatusServiceUnavailable, CodeUploadsUnavailable, "this deployment has no object storage for uploads")
	}
	key, e := idempotencyKey(r.Header)
	if e != nil {
		return e
	}
	var body assetBody
	if e := decodeJSON(w, r, s.limits.MaxBodyBytes, &body); e != nil {
		return e
	}
	req, e := s.validateUpload(body)
	if e != nil {
		return e
	}
	ctx, cancel := context.WithTimeout(r.Context(), dbTimeout)
	defer cancel()
	id := uuid.Must(uuid.NewV7())
	objectKey, err := blob.AssetKey(p.TenantID.String(), id.String(), uploadObjectName)
	if err != nil {
		return s.internal(ctx, "asset key", err)
	}
	var (
		a       asset.Asset
		created bool
	)
	err = pgx.BeginFunc(ctx, s.pool, func(tx pgx.Tx) error {
		a, created, err = asset.CreateUpload(ctx, tx, asset.NewUpload{ID: id, TenantID: p.TenantID, IdempotencyKey: key, RequestHash: req.hash(),
			MediaType: req.media, ContentType: req.contentType, SizeBytes: req.size, SHA256: req.sha256, Filename: req.filename, ObjectKey: objectKey})
		if err != nil || !created {
			return err
		}
		return s.checkQuota(ctx, tx, p.TenantID, asset.Usage{Assets: 1, Bytes: a.SizeBytes}, true)
	})
	var ae *apiError
	switch {
	case errors.As(err, &ae):
		return ae
	case errors.Is(err, asset.ErrIdempotencyConflict):
		return errorf(http.StatusConflict, CodeIdempotencyConflict,
			"Idempotency-Key %q was already used for a different upload (asset %s); use a new key for a new file", key, a.ID)
	case err != nil:
		return s.internal(ctx, "create upload", err)
	}
	view := uploadView{AssetID: a.ID, Status: a.Status}
	if a.Status == asset.PendingUpload {
		up, err := s.uploads.PresignPut(ctx, a.ObjectKey, blob.UploadSpec{ContentType: a.ContentType, Size: a.SizeBytes, SHA256: hex.EncodeToString(a.SHA256)}, s.uploadTTL)
		if err != nil {
			return s.internal(ctx, "presign upload", err)
		}
		view.Upload = &presignedPut{Method: up.Method, URL: up.URL, Headers: up.Headers, ExpiresAt: up.ExpiresAt.Truncate(time.Second)}
	}
	status := http.StatusOK
	if created {
		status = http.StatusCreated
		s.log.InfoContext(ctx, "upload announced", slog.String("tenant_id", p.TenantID.String()), slog.String("asset_id", a.ID.String()),
			slog.String("media_type", string(a.MediaType)), slog.Int64("size_bytes", a.SizeBytes), slog.String("request_id", requestID(ctx)))
	}
	writeJSON(w, status, view)
	return nil
}

// completeAsset serves POST /v1/assets/{id}/complete: the stored object
// must have the size and sha256 the upload promised; then the upload is
// PROCESSING and probed. 202 with the asset's status, also for a repeat.
func (s *Server) completeAsset(w http.ResponseWriter, r *http.Request, p tenant.Principal) *apiError {
	if s.uploads == nil {
		return errorf(http.StatusServiceUnavailable, CodeUploadsUnavailable, "this deployment has no object storage for uploads")
	}
	id, e := assetID(r)
	if e != nil {
		return e
	}
	ctx := r.Context()
	a, err := asset.OfTenant(ctx, s.pool, p.TenantID, id)
	if errors.Is(err, asset.ErrNotFound) {
		return assetNotFound(id)
	}
	if err != nil {
		return s.internal(ctx, "read asset", err)
	}
	if a.Status != asset.PendingUpload {
		writeJSON(w, http.StatusAccepted, uploadView{AssetID: a.ID, Status: a.Status})
		return nil
	}
	checked, e := s.checkUpload(ctx, a)
	if e != nil {
		return e
	}
	source, err := blob.AssetKey(a.TenantID.String(), a.ID.String(), sourceObjectName)
	if err != nil {
		return s.internal(ctx, "source key", err)
	}
	copyCtx, cancel := context.WithTimeout(ctx, hashTimeout)
	err = s.uploads.Copy(copyCtx, a.ObjectKey, source, checked.ETag)
	cancel()
	if errors.Is(err, blob.ErrChanged) {
		return errorf(http.StatusConflict, CodeNotUploaded, "the uploaded object of asset %s changed while it was checked; call complete again", a.ID)
	}
	if err != nil {
		return s.internal(ctx, "copy upload", err)
	}
	dbCtx, cancel := context.WithTimeout(ctx, dbTimeout)
	defer cancel()
	// A complete that another one beat to it is a stale no-op: the
	// upload is PROCESSING or past it, with its probe on the way.
	err = pgx.BeginFunc(dbCtx, s.pool, func(tx pgx.Tx) error {
		_, err := aggregate.Apply(dbCtx, tx, asset.Upload, a.ID, asset.Guard(asset.PendingUpload).Into(asset.Processing),
			func(ctx context.Context, tx pgx.Tx, _ asset.Asset) (aggregate.Result, error) {
				if err := asset.MarkUploaded(ctx, tx, a.ID, source); err != nil {
					return 0, err
				}
				probe, err := origin.EmitFor(task.Aggregate{Type: task.AssetAggregateType, ID: a.ID, TenantID: a.TenantID},
					task.Postprocess{AssetID: a.ID, Step: catalog.TagProbe})
				if err != nil {
					return 0, err
				}
				return aggregate.Applied, outbox.Write(ctx, tx, probe)
			})
		return err
	})
	if err != nil {
		return s.internal(ctx, "complete upload", err)
	}
	// The upload's own object is not needed any more; a leftover (this
	// delete failed) is only storage.
	rmCtx, rmCancel := context.WithTimeout(context.WithoutCancel(ctx), dbTimeout)
	if err := s.uploads.Delete(rmCtx, a.ObjectKey); err != nil {
		s.log.WarnContext(ctx, "remove the upload's object after its copy", slog.String("asset_id", a.ID.String()), slog.String("error", err.Error()))
	}
	rmCancel()
	a, err = asset.Get(ctx, s.pool, a.ID)
	if err != nil {
		return s.internal(ctx, "read asset", err)
	}
	s.log.InfoContext(ctx, "upload complete", slog.String("asset_id", a.ID.String()), slog.String("request_id", requestID(ctx)))
	writeJSON(w, http.StatusAccepted, uploadView{AssetID: a.ID, Status: a.Status})
	return nil
}

// checkUpload compares the stored object with what its upload promised. A
// mismatched object is removed, so that the next PUT starts clean.
func (s *Server) checkUpload(ctx context.Context, a asset.Asset) (blob.Object, *apiError) {
	statCtx, cancel := context.WithTimeout(ctx, dbTimeout)
	obj, err := s.uploads.Stat(statCtx, a.ObjectKey)
	cancel()
	if errors.Is(err, blob.ErrNotFound) {
		return blob.Object{}, errorf(http.StatusConflict, CodeNotUploaded,
			"nothing was uploaded for asset %s yet: PUT the file to the upload URL POST /v1/assets returned (repeat that POST with the same Idempotency-Key for a fresh URL), then complete", a.ID)
	}
	if err != nil {
		return blob.Object{}, s.internal(ctx, "stat upload", err)
	}
	mismatch := func(format string, args ...any) *apiError {
		rmCtx, cancel := context.WithTimeout(context.WithoutCancel(ctx), dbTimeout)
		defer cancel()
		if err := s.uploads.Delete(rmCtx, a.ObjectKey); err != nil {
			s.log.WarnContext(ctx, "remove mismatched upload", slog.String("asset_id", a.ID.String()), slog.String("error", err.Error()))
		}
		return errorf(http.StatusUnprocessableEntity, CodeUploadMismatch, format+"; upload the file again (repeat POST /v1/assets with the same Idempotency-Key for a fresh URL), or announce the right size and sha256 under a new key", args...)
	}
	if obj.Size != a.SizeBytes {
		return blob.Object{}, mismatch("the uploaded object of asset %s is %d bytes, and the upload promised %d", a.ID, obj.Size, a.SizeBytes)
	}
	// Only the server's own checksum, which it checked against the body,
	// counts; metadata is what a writer claimed.
	sumCtx, cancel := context.WithTimeout(ctx, dbTimeout)
	sum, err := s.uploads.ServerSHA256(sumCtx, a.ObjectKey)
	cancel()
	if err != nil {
		return blob.Object{}, s.internal(ctx, "read upload checksum", err)
	}
	if sum == "" {
		sum, err = s.hashUpload(ctx, a.ObjectKey)
		if errors.Is(err, context.DeadlineExceeded) {
			return blob.Object{}, errorf(http.StatusServiceUnavailable, CodeUploadCheckSlow,
				"the storage server keeps no checksum of its own, and the %d bytes of asset %s could not be read back within %s to check them; call complete again",
				a.SizeBytes, a.ID, hashTimeout)
		}
		if err != nil {
			return blob.Object{}, s.internal(ctx, "hash upload", err)
		}
	}
	if want := hex.EncodeToString(a.SHA256); sum != want {
		return blob.Object{}, mismatch("the uploaded object of asset %s has sha256 %s, and the upload promised %s", a.ID, sum, want)
	}
	return obj, nil
}

// hashUpload reads an object back to compute its sha256, for storage that
// kept no checksum of its own.
func (s *Server) hashUpload(ctx context.Context, key string) (string, error) {
	ctx, cancel := context.WithTimeout(ctx, hashTimeout)
	defer cancel()
	sum, err := s.uploads.ReadSHA256(ctx, key)
	if err != nil && ctx.Err() != nil {
		return "", fmt.Errorf("read upload back: %w", ctx.Err())
	}
	return sum, err
}

// assetID parses the {id} of the path.
func assetID(r *http.Request) (uuid.UUID, *apiError) { return pathID(r, "asset id", "POST /v1/assets") }

func assetNotFound(id uuid.UUID) *apiError {
	return errorf(http.StatusNotFound, CodeNotFound, "no asset %s", id)
}

// pageSize reads ?limit=.
func pageSize(r *http.Request) (int, *apiError) {
	raw := r.URL.Query().Get("limit")
	if raw == "" {
		return DefaultPageSize, nil
	}
	n, err := strconv.Atoi(raw)
	if err != nil || n < 1 || n > MaxPageSize {
		return 0, errorf(http.StatusBadRequest, CodeInvalidField, "limit must be from 1 to %d, got %q", MaxPageSize, truncate(raw, 16))
	}
	return n, nil
}
