package api

import (
	"context"
	"encoding/hex"
	"errors"
	"log/slog"
	"net/http"
	"time"

	"github.com/google/uuid"

	"github.com/aivedio/pipeline/shared/asset"
	"github.com/aivedio/pipeline/shared/blob"
	"github.com/aivedio/pipeline/shared/tenant"
)

// assetView is an asset as GET /v1/assets answers it.
type assetView struct {
	AssetID uuid.UUID `json:"asset_id"`
	// Kind is what the media is: VIDEO, AUDIO or IMAGE.
	Kind string `json:"kind"`
	// Role is where it came from: UPLOAD, OUTPUT (of a generation), RENDER,
	// or the derivative it is (PROXY, THUMBNAIL, WAVEFORM).
	Role            string       `json:"role"`
	Status          asset.Status `json:"status"`
	TaskID          *uuid.UUID   `json:"task_id,omitempty"`
	SourceAssetID   *uuid.UUID   `json:"source_asset_id,omitempty"`
	Filename        string       `json:"filename,omitempty"`
	ContentType     string       `json:"content_type"`
	DurationSeconds *float64     `json:"duration_seconds"`
	Width           *int         `json:"width"`
	Height          *int         `json:"height"`
	VideoCodec      *string      `json:"video_codec"`
	AudioCodec      *string      `json:"audio_codec"`
	SizeBytes       int64        `json:"size_bytes"`
	SHA256          string       `json:"sha256"`
	// HeldByReview is the status of the content review that holds a
	// READY output back (no download URL, no timeline, no render) until it
	// approves; absent when nothing holds it.
	HeldByReview string `json:"held_by_review,omitempty"`
	// DownloadURL is a short-lived link to the bytes, once READY and not
	// held by a review.
	DownloadURL  string       `json:"download_url,omitempty"`
	URLExpiresAt *time.Time   `json:"download_url_expires_at,omitempty"`
	Derivatives  []assetView  `json:"derivatives"`
	Error        *errorDetail `json:"error"`
	CreatedAt    time.Time    `json:"created_at"`
	UpdatedAt    time.Time    `json:"updated_at"`
	objectKey    string
	usable       bool // may be handed out: asset.Asset.Usable
}

// assetPage is the answer of GET /v1/assets.
type assetPage struct {
	Assets []assetView `json:"assets"`
	// NextCursor fetches the next page (?cursor=); empty on the last.
	NextCursor string `json:"next_cursor"`
}

func assetViewOf(a asset.Asset) assetView {
	v := assetView{AssetID: a.ID, Kind: mediaKind(a), Role: role(a), Status: a.Status, TaskID: a.TaskID, SourceAssetID: a.SourceAssetID,
		Filename: a.Filename, ContentType: a.ContentType, Width: a.Width, Height: a.Height, SizeBytes: a.SizeBytes,
		SHA256: hex.EncodeToString(a.SHA256), Derivatives: []assetView{}, CreatedAt: a.CreatedAt, UpdatedAt: a.UpdatedAt, objectKey: a.ObjectKey}
	if a.DurationMS != nil {
		d := float64(*a.DurationMS) / 1000
		v.DurationSeconds = &d
	}
	if a.VideoCodec != "" {
		v.VideoCodec = &a.VideoCodec
	}
	if a.AudioCodec != "" {
		v.AudioCodec = &a.AudioCodec
	}
	if a.Status == asset.Failed {
		v.Error = &errorDetail{Code: a.ErrorCode, Message: a.ErrorMessage}
	}
	v.HeldByReview, v.usable = a.Review, a.Usable()
	return v
}

func mediaKind(a asset.Asset) string {
	switch {
	case a.MediaType != "":
		return string(a.MediaType)
	case a.Kind == asset.KindThumbnail || a.Kind == asset.KindWaveform:
		return string(asset.Image)
	}
	return string(asset.Video)
}

func role(a asset.Asset) string {
	switch {
	case a.Kind != asset.KindSource:
		return string(a.Kind)
	case a.TaskID != nil:
		return "OUTPUT"
	}
	return "UPLOAD"
}

// getAsset serves GET /v1/assets/{id}. Another tenant's asset reads
// exactly like a missing one.
func (s *Server) getAsset(w http.ResponseWriter, r *http.Request, p tenant.Principal) *apiError {
	id, e := assetID(r)
	if e != nil {
		return e
	}
	ctx, cancel := context.WithTimeout(r.Context(), dbTimeout)
	defer cancel()
	a, err := asset.OfTenant(ctx, s.pool, p.TenantID, id)
	if errors.Is(err, asset.ErrNotFound) {
		return assetNotFound(id)
	}
	if err != nil {
		return s.internal(ctx, "read asset", err)
	}
	views, e := s.assetViews(ctx, []asset.Asset{a})
	if e != nil {
		return e
	}
	writeJSON(w, http.StatusOK, views[0])
	return nil
}

// listAssets serves GET /v1/assets?cursor=&limit=: the tenant's assets
// (uploads, outputs, renders) newest first, each with its derivatives.
func (s *Server) listAssets(w http.ResponseWriter, r *http.Request, p tenant.Principal) *apiError {
	limit, e := pageSize(r)
	if e != nil {
		return e
	}
	ctx, cancel := context.WithTimeout(r.Context(), dbTimeout)
	defer cancel()
	page, err := asset.List(ctx, s.pool, p.TenantID, r.URL.Query().Get("cursor"), limit)
	if errors.Is(err, asset.ErrBadCursor) {
		return errorf(http.StatusBadRequest, CodeInvalidField, "cursor is not one GET /v1/assets returned; start again without it")
	}
	if err != nil {
		return s.internal(ctx, "list assets", err)
	}
	views, e := s.assetViews(ctx, page.Assets)
	if e != nil {
		return e
	}
	writeJSON(w, http.StatusOK, assetPage{Assets: views, NextCursor: page.Next})
	return nil
}

// assetViews renders originals with their derivatives and download URLs.
func (s *Server) assetViews(ctx context.Context, originals []asset.Asset) ([]assetView, *apiError) {
	ids := make([]uuid.UUID, len(originals))
	for i, a := range originals {
		ids[i] = a.ID
	}
	derived, err := asset.DerivativesOf(ctx, s.pool, ids)
	if err != nil {
		return nil, s.internal(ctx, "list derivatives", err)
	}
	views := make([]assetView, len(originals))
	for i, a := range originals {
		views[i] = assetViewOf(a)
		for _, d := range derived[a.ID] {
			views[i].Derivatives = append(views[i].Derivatives, assetViewOf(d))
		}
		s.presignView(ctx, &views[i])
		for j := range views[i].Derivatives {
			s.presignView(ctx, &views[i].Derivatives[j])
		}
	}
	return views, nil
}

// presignView adds the download URL of a READY asset; one that cannot be
// made is left out and logged (without the URL).
func (s *Server) presignView(ctx context.Context, v *assetView) {
	if s.blob == nil || !v.usable {
		return
	}
	pctx, cancel := context.WithTimeout(ctx, 5*time.Second)
	defer cancel()
	expires := time.Now().Add(s.downloadTTL).UTC().Truncate(time.Second)
	url, err := s.blob.PresignDownload(pctx, v.objectKey, s.downloadTTL, blob.Download{Filename: downloadName(v.Filename, v.objectKey), ContentType: v.ContentType})
	if err != nil {
		s.log.ErrorContext(ctx, "presign asset download", slog.String("asset_id", v.AssetID.String()),
			slog.String("error", err.Error()), slog.String("request_id", requestID(ctx)))
		return
	}
	v.DownloadURL, v.URLExpiresAt = url, &expires
}
