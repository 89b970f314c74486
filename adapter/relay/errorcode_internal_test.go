package relay

import (
	"context"
	"errors"
	"fmt"
	"testing"

	"github.com/aivedio/pipeline/adapter/mq"
)

// TestErrorCode: what an operator reads in outbox_events.last_error_code
// tells a refusal no retry cures (fix the credentials or the grant) from
// an outage.
func TestErrorCode(t *testing.T) {
	for _, c := range []struct {
		err  error
		want string
	}{
		{fmt.Errorf("send to t: %w: CODE: UNAUTHORIZED, MESSAGE: check signature failed.", mq.ErrUnauthenticated), "unauthenticated"},
		{fmt.Errorf("send to t: %w: CODE: UNAUTHORIZED, MESSAGE: no permission", mq.ErrForbidden), "forbidden"},
		{fmt.Errorf("send: %w", context.DeadlineExceeded), "timeout"},
		{fmt.Errorf("row 7: %w", errInvalidRow), "invalid_row"},
		{errors.New("connection refused"), "publish_failed"},
	} {
		if got := errorCode(c.err); got != c.want {
			t.Errorf("errorCode(%v) = %q, want %q", c.err, got, c.want)
		}
	}
}
