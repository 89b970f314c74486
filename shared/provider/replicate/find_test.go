package replicate_test

import (
	"errors"
	"fmt"
	"net/http"
	"net/http/httptest"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/aivedio/pipeline/shared/provider"
	"github.com/aivedio/pipeline/shared/provider/replicate"
)

// fakeAPI serves list pages and single predictions from fixed JSON, the
// way Replicate might shape them, and counts single lookups.
type fakeAPI struct {
	pages   map[string]string // cursor ("" for the first page) → page body
	preds   map[string]string // id → prediction body
	lookups atomic.Int32
	url     string
}

func startFake(t *testing.T, api *fakeAPI) *replicate.Client {
	t.Helper()
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if id, ok := strings.CutPrefix(r.URL.Path, "/v1/predictions/"); ok {
			api.lookups.Add(1)
			body, found := api.preds[id]
			if !found {
				w.WriteHeader(http.StatusNotFound)
				_, _ = w.Write([]byte(`{"detail":"Not found."}`))
				return
			}
			_, _ = w.Write([]byte(body))
			return
		}
		body, found := api.pages[r.URL.Query().Get("cursor")]
		if !found {
			w.WriteHeader(http.StatusBadRequest)
			return
		}
		_, _ = w.Write([]byte(strings.ReplaceAll(body, "BASE", api.url)))
	}))
	t.Cleanup(srv.Close)
	api.url = srv.URL
	return newClient(t, func(c *replicate.Config) { c.BaseURL, c.MaxFindPages = srv.URL, 3 })
}

// pred renders a prediction; webhook "-" leaves the field out, "" makes
// it null.
func pred(id, created, source, webhook string) string {
	hook := `,"webhook":null`
	switch webhook {
	case "-":
		hook = ""
	case "":
	default:
		hook = fmt.Sprintf(`,"webhook":%q`, webhook)
	}
	return fmt.Sprintf(`{"id":%q,"status":"processing","created_at":%q,"source":%q%s}`, id, created, source, hook)
}

func TestFindEdges(t *testing.T) {
	t.Parallel()
	since := time.Date(2026, 11, 30, 12, 0, 0, 0, time.UTC)
	in := "2026-11-30T12:00:30Z"
	before := "2026-11-30T11:00:00Z"
	ours := "https://api.example/cb?aivedio_client_request_id=want"
	theirs := "https://api.example/cb?aivedio_client_request_id=other"

	t.Run("list without webhooks: each is looked up", func(t *testing.T) {
		t.Parallel()
		api := &fakeAPI{
			pages: map[string]string{"": `{"next":null,"results":[` + pred("a", in, "api", "-") + `,` + pred("b", in, "api", "-") + `]}`},
			preds: map[string]string{"a": pred("a", in, "api", theirs), "b": pred("b", in, "api", ours)},
		}
		c := startFake(t, api)
		job, err := c.FindByClientRequestID(t.Context(), "want", since)
		require.NoError(t, err)
		require.Equal(t, "b", job.ID)
		require.Equal(t, "want", job.ClientRequestID)
		require.Equal(t, int32(2), api.lookups.Load())
	})

	t.Run("a listed prediction deleted since is skipped", func(t *testing.T) {
		t.Parallel()
		c := startFake(t, &fakeAPI{pages: map[string]string{"": `{"next":null,"results":[` + pred("gone", in, "api", "-") + `]}`}})
		_, err := c.FindByClientRequestID(t.Context(), "want", since)
		requireClass(t, provider.ClassNotFound, err)
	})

	t.Run("web predictions and other webhooks are not ours", func(t *testing.T) {
		t.Parallel()
		c := startFake(t, &fakeAPI{pages: map[string]string{"": `{"next":null,"results":[` + pred("a", in, "web", "") + `,` + pred("b", in, "api", theirs) + `,` + pred("c", in, "api", "https://elsewhere/hook") + `]}`}})
		_, err := c.FindByClientRequestID(t.Context(), "want", since)
		requireClass(t, provider.ClassNotFound, err)
	})

	t.Run("an API prediction without a webhook makes a miss ambiguous", func(t *testing.T) {
		t.Parallel()
		c := startFake(t, &fakeAPI{pages: map[string]string{"": `{"next":null,"results":[` + pred("a", in, "api", "") + `]}`}})
		_, err := c.FindByClientRequestID(t.Context(), "want", since)
		requireClass(t, provider.ClassRejected, err)
		var pe *provider.Error
		require.True(t, errors.As(err, &pe))
		require.Equal(t, replicate.CodeLookupAmbiguous, pe.Code)
	})

	t.Run("a provider ignoring created_after stops at the window", func(t *testing.T) {
		t.Parallel()
		c := startFake(t, &fakeAPI{pages: map[string]string{
			"":  `{"next":"BASE/v1/predictions?cursor=2","results":[` + pred("a", in, "api", theirs) + `,` + pred("old", before, "api", "") + `]}`,
			"2": `{"next":null,"results":[` + pred("older", before, "api", ours) + `]}`,
		}})
		_, err := c.FindByClientRequestID(t.Context(), "want", since)
		requireClass(t, provider.ClassNotFound, err)
	})

	t.Run("too many pages", func(t *testing.T) {
		t.Parallel()
		page := `{"next":"BASE/v1/predictions?cursor=x","results":[` + pred("a", in, "api", theirs) + `]}`
		c := startFake(t, &fakeAPI{pages: map[string]string{"": page, "x": page}})
		_, err := c.FindByClientRequestID(t.Context(), "want", since)
		requireClass(t, provider.ClassRejected, err)
	})

	t.Run("a next link to another origin", func(t *testing.T) {
		t.Parallel()
		c := startFake(t, &fakeAPI{pages: map[string]string{"": `{"next":"https://evil.example/v1/predictions?cursor=2","results":[]}`}})
		_, err := c.FindByClientRequestID(t.Context(), "want", since)
		requireClass(t, provider.ClassMalformed, err)
	})

	t.Run("a relative next link", func(t *testing.T) {
		t.Parallel()
		c := startFake(t, &fakeAPI{
			pages: map[string]string{
				"":  `{"next":"/v1/predictions?cursor=2","results":[]}`,
				"2": `{"next":null,"results":[` + pred("b", in, "api", ours) + `]}`,
			},
			preds: map[string]string{"b": pred("b", in, "api", ours)},
		})
		job, err := c.FindByClientRequestID(t.Context(), "want", since)
		require.NoError(t, err)
		require.Equal(t, "b", job.ID)
	})

	t.Run("no results field", func(t *testing.T) {
		t.Parallel()
		c := startFake(t, &fakeAPI{pages: map[string]string{"": `{"next":null}`}})
		_, err := c.FindByClientRequestID(t.Context(), "want", since)
		requireClass(t, provider.ClassMalformed, err)
	})
}
