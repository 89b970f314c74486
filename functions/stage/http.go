package stage

import (
	"context"
	"errors"
	"net/http"

	"github.com/cloudevents/sdk-go/v2/binding"
	"github.com/cloudevents/sdk-go/v2/event"
	"github.com/cloudevents/sdk-go/v2/protocol"
	cehttp "github.com/cloudevents/sdk-go/v2/protocol/http"
)

// maxEventBytes bounds a request body: an envelope's payload is at most
// 64 KiB (DESIGN.md §2), and the attributes are small.
const maxEventBytes = 1 << 20

// HandleFunc is a function's CloudEvents entry point, as func-go calls it.
type HandleFunc func(ctx context.Context, ev event.Event) (*event.Event, error)

// HTTPHandler serves handle over HTTP CloudEvents (binary and structured
// mode), one call per request on the request's own goroutine and context:
// what func-go does in a deployment, for `go run ./local` and tests.
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
			http.Error(w, "not a CloudEvent: "+err.Error(), status)
			return
		}
		reply, err := handle(r.Context(), *ev)
		status := http.StatusOK
		if err != nil {
			status = http.StatusInternalServerError
			var result *cehttp.Result
			if protocol.ResultAs(err, &result) && result.StatusCode >= 100 && result.StatusCode < 600 {
				status = result.StatusCode
			}
		}
		if reply != nil && err == nil {
			if werr := cehttp.WriteResponseWriter(r.Context(), binding.ToMessage(reply), status, w); werr != nil {
				http.Error(w, werr.Error(), http.StatusInternalServerError)
			}
			return
		}
		w.WriteHeader(status)
		if err != nil {
			_, _ = w.Write([]byte(err.Error()))
		}
	})
}
