package api

import (
	"crypto/sha256"
	"encoding/json"
	"net/http"
	"slices"
	"strings"
	"unicode/utf8"

	"github.com/google/uuid"
)

// Limits of a generation request that are part of the API, not
// configuration.
const (
	MinDurationSeconds = 1
	MaxDurationSeconds = 20
	MinPriority        = 0
	MaxPriority        = 10
	MaxInputAssets     = 8
	MaxIdempotencyKey  = 200
)

// Resolutions are the output sizes a generation may ask for.
var Resolutions = []string{"640x360", "1280x720", "1920x1080", "720x1280", "1080x1920"}

// createBody is the JSON body of POST /v1/generations as sent.
type createBody struct {
	Model           string   `json:"model"`
	Prompt          string   `json:"prompt"`
	DurationSeconds int      `json:"duration_seconds"`
	Resolution      string   `json:"resolution"`
	InputAssetIDs   []string `json:"input_asset_ids"`
	Priority        *int     `json:"priority"`
}

// createRequest is a validated generation request, defaults applied.
type createRequest struct {
	Model           string
	Prompt          string
	DurationSeconds int
	Resolution      string
	InputAssetIDs   []uuid.UUID
	Priority        int
}

// validate checks every field and returns the request, or a 400 naming the
// first field that is wrong and what it takes.
func (s *Server) validate(b createBody) (createRequest, *apiError) {
	bad := func(format string, args ...any) (createRequest, *apiError) {
		return createRequest{}, errorf(http.StatusBadRequest, CodeInvalidField, format, args...)
	}
	if b.Model == "" {
		return bad("model is required; one of %s", strings.Join(s.models, ", "))
	}
	if _, ok := slices.BinarySearch(s.models, b.Model); !ok {
		return bad("model %q is not offered; use one of %s", truncate(b.Model, 64), strings.Join(s.models, ", "))
	}
	if strings.TrimSpace(b.Prompt) == "" {
		return bad("prompt is required and must not be blank")
	}
	if n := utf8.RuneCountInString(b.Prompt); n > s.limits.MaxPromptChars {
		return bad("prompt is %d characters long; the limit is %d", n, s.limits.MaxPromptChars)
	}
	if strings.ContainsRune(b.Prompt, 0) {
		return bad("prompt must not contain NUL characters")
	}
	if b.DurationSeconds < MinDurationSeconds || b.DurationSeconds > MaxDurationSeconds {
		if b.DurationSeconds == 0 {
			return bad("duration_seconds is required, from %d to %d", MinDurationSeconds, MaxDurationSeconds)
		}
		return bad("duration_seconds must be from %d to %d, got %d", MinDurationSeconds, MaxDurationSeconds, b.DurationSeconds)
	}
	if !slices.Contains(Resolutions, b.Resolution) {
		if b.Resolution == "" {
			return bad("resolution is required; one of %s", strings.Join(Resolutions, ", "))
		}
		return bad("resolution %q is not offered; use one of %s", truncate(b.Resolution, 32), strings.Join(Resolutions, ", "))
	}
	priority := MinPriority
	if b.Priority != nil {
		priority = *b.Priority
		if priority < MinPriority || priority > MaxPriority {
			return bad("priority must be from %d to %d, got %d", MinPriority, MaxPriority, priority)
		}
	}
	if len(b.InputAssetIDs) > MaxInputAssets {
		return bad("input_asset_ids lists %d assets; the limit is %d", len(b.InputAssetIDs), MaxInputAssets)
	}
	inputs := make([]uuid.UUID, 0, len(b.InputAssetIDs))
	for i, raw := range b.InputAssetIDs {
		id, err := uuid.Parse(raw)
		if err != nil || len(raw) != 36 {
			return bad("input_asset_ids[%d] is not an asset id (a UUID like 0190c0de-0000-7000-8000-000000000000)", i)
		}
		if slices.Contains(inputs, id) {
			return bad("input_asset_ids lists asset %s twice", id)
		}
		inputs = append(inputs, id)
	}
	return createRequest{
		Model: b.Model, Prompt: b.Prompt, DurationSeconds: b.DurationSeconds, Resolution: b.Resolution,
		InputAssetIDs: inputs, Priority: priority,
	}, nil
}

// hash is the SHA-256 of the request's canonical encoding: the validated
// fields, defaults applied, in a fixed order. Two bodies that mean the same
// request (other key order or whitespace, an explicit default priority,
// upper-case UUIDs) hash the same; any difference in meaning does not.
func (c createRequest) hash() []byte {
	canonical := struct {
		V               int         `json:"v"`
		Model           string      `json:"model"`
		Prompt          string      `json:"prompt"`
		DurationSeconds int         `json:"duration_seconds"`
		Resolution      string      `json:"resolution"`
		InputAssetIDs   []uuid.UUID `json:"input_asset_ids"`
		Priority        int         `json:"priority"`
	}{1, c.Model, c.Prompt, c.DurationSeconds, c.Resolution, c.InputAssetIDs, c.Priority}
	b, err := json.Marshal(canonical)
	if err != nil {
		panic("api: encode canonical request: " + err.Error()) // strings, ints and UUIDs always encode
	}
	sum := sha256.Sum256(b)
	return sum[:]
}

// idempotencyKey reads the Idempotency-Key header: exactly one, 1 to 200
// printable ASCII characters.
func idempotencyKey(h http.Header) (string, *apiError) {
	values := h.Values("Idempotency-Key")
	if len(values) == 0 || values[0] == "" {
		return "", errorf(http.StatusBadRequest, CodeInvalidIdempotencyKey,
			"the Idempotency-Key header is required: a unique string per request (1 to %d printable characters, e.g. a UUID), sent again unchanged when retrying", MaxIdempotencyKey)
	}
	if len(values) > 1 {
		return "", errorf(http.StatusBadRequest, CodeInvalidIdempotencyKey, "send exactly one Idempotency-Key header")
	}
	key := values[0]
	if len(key) > MaxIdempotencyKey {
		return "", errorf(http.StatusBadRequest, CodeInvalidIdempotencyKey, "the Idempotency-Key is %d characters long; the limit is %d", len(key), MaxIdempotencyKey)
	}
	for i := range len(key) {
		if key[i] < 0x20 || key[i] > 0x7e {
			return "", errorf(http.StatusBadRequest, CodeInvalidIdempotencyKey, "the Idempotency-Key must be printable ASCII; byte %d is not", i)
		}
	}
	return key, nil
}

// truncate shortens s, a client's input quoted in a message, to n runes.
func truncate(s string, n int) string {
	if utf8.RuneCountInString(s) <= n {
		return s
	}
	return string([]rune(s)[:n]) + "…"
}
