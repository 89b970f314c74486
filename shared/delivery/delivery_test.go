package delivery_test

import (
	"context"
	"errors"
	"net/http"
	"net/http/httptest"
	"testing"
	"time"

	"github.com/cloudevents/sdk-go/v2/event"
	"github.com/stretchr/testify/require"

	"github.com/aivedio/pipeline/shared/delivery"
	"github.com/aivedio/pipeline/shared/outcome"
)

func testEvent() event.Event {
	ev := event.New()
	ev.SetID("0193a5e0-7c1e-7b3a-9d2f-3c4b5a6d7e8f")
	ev.SetSource("/aivedio/test")
	ev.SetType("test.happened")
	return ev
}

// TestBothWaysReadTheAnswerAlike: success, a permanent refusal and a
// failure mean the same in process and over HTTP.
func TestBothWaysReadTheAnswerAlike(t *testing.T) {
	t.Parallel()
	for name, tt := range map[string]struct {
		status    int
		err       error
		ok        bool
		permanent bool
	}{
		"success":   {status: http.StatusOK, ok: true},
		"no body":   {status: http.StatusNoContent, ok: true},
		"permanent": {status: http.StatusUnprocessableEntity, err: outcome.Permanentf("payload.invalid", "no"), permanent: true},
		"failure":   {status: http.StatusInternalServerError, err: errors.New("database down")},
	} {
		t.Run(name, func(t *testing.T) {
			t.Parallel()
			srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
				require.Equal(t, "0193a5e0-7c1e-7b3a-9d2f-3c4b5a6d7e8f", r.Header.Get("Ce-Id"), "binary mode")
				w.WriteHeader(tt.status)
			}))
			t.Cleanup(srv.Close)
			fn := delivery.Func(func(context.Context, event.Event) (*event.Event, error) { return nil, tt.err })
			for way, d := range map[string]delivery.Deliverer{"in process": fn, "http": delivery.NewHTTP(srv.URL, 1, time.Second)} {
				err := d.Deliver(t.Context(), testEvent())
				if tt.ok {
					require.NoError(t, err, way)
					continue
				}
				require.Error(t, err, way)
				require.Equal(t, tt.permanent, outcome.IsPermanent(err), way)
			}
		})
	}
}
