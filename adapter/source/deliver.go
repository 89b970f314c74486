package source

import (
	"time"

	"github.com/aivedio/pipeline/shared/delivery"
)

// Deliverer hands one CloudEvent to the group's stage function; see
// [delivery.Deliverer] for how its error is read.
type Deliverer = delivery.Deliverer

// HandlerFunc is a stage function's Handle, delivered to in process.
type HandlerFunc = delivery.Func

// HTTPDeliverer POSTs events to a function's URL, retrying its cold start.
type HTTPDeliverer = delivery.HTTP

// NewHTTPDeliverer is [delivery.NewHTTP]: one idle connection per worker,
// coldStart the bound on waiting for a function scaling from zero.
func NewHTTPDeliverer(url string, workers int, coldStart time.Duration) *HTTPDeliverer {
	return delivery.NewHTTP(url, workers, coldStart)
}
