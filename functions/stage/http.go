package stage

import (
	"context"
	"errors"
	"fmt"
	"net/http"

	"github.com/cloudevents/sdk-go/v2/binding"
	"github.com/cloudevents/sdk-go/v2/event"
	cehttp "github.com/cloudevents/sdk-go/v2/protocol/http"

	"github.com/aivedio/pipeline/shared/outcome"
)

// maxEventBytes bounds a request body: an envelope's payload is at most
// 64 KiB (docs/design.md §2), and the attributes are small.
const maxEventBytes = 1 << 20

// HandleFunc is a function's CloudEvents entry point, as func-go calls it.
type HandleFunc func(ctx context.Context, ev event.Event) (*event.Event, error)

// HTTPHandler serves handle over HTTP CloudEvents (binary and structured
// mode), one call per request on the request's own goroutine and context:
// what func-go does in a deployment, for `go run ./local` and tests. A
// failure is answered with its status and an [outcome.Body] naming its
// class and code, which the source adapter reads back.
//
// It exists because sdk-go's client.NewHTTPReceiveHandler hands each
// request's message to whichever request goroutine is waiting: under
// concurrent requests one goroutine can take another's message, the other
// then gives up when its own request ends, and a message is left with no
// one to handle it, its request hanging until the caller times out.
func HTTPHandler(handle HandleFunc) http.Handler {
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if r.Method != http.MethodPost {
			w.Header().Set("Allow", http.MethodPost)
			http.Error(w, "POST a CloudEvent", http.StatusMethodNotAllowed)
			return
		}
		r.Body = http.MaxBytesReader(w, r.Body, maxEventBytes)
		msg := cehttp.NewMessageFromHttpRequest(r)
		defer func() { _ = msg.Finish(nil) }()
		ev, err := binding.ToEvent(r.Context(), msg)
		if err == nil {
			err = ev.Validate()
		}
		if err != nil {
			status := http.StatusBadRequest
			if errors.Is(err, binding.ErrUnknownEncoding) {
				status = http.StatusUnsupportedMediaType
			}
			outcome.WriteHTTP(w, status, outcome.Permanent("not_cloudevent", fmt.Errorf("not a CloudEvent: %w", err)))
			return
		}
		reply, err := handle(r.Context(), *ev)
		if err != nil {
			status, cause := outcome.ResultOf(err)
			outcome.WriteHTTP(w, status, cause)
			return
		}
		if reply != nil {
			if werr := cehttp.WriteResponseWriter(r.Context(), binding.ToMessage(reply), http.StatusOK, w); werr != nil {
				outcome.WriteHTTP(w, http.StatusInternalServerError, werr)
			}
			return
		}
		w.WriteHeader(http.StatusOK)
	})
}
