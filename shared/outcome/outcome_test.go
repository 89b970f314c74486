package outcome_test

import (
	"context"
	"errors"
	"fmt"
	"testing"

	"github.com/stretchr/testify/require"

	"github.com/aivedio/pipeline/shared/outcome"
)

func TestOf(t *testing.T) {
	t.Parallel()
	tests := []struct {
		name      string
		err       error
		wantClass outcome.Class
		wantCode  string
	}{
		{"permanent", outcome.Permanent("envelope.bad_id", errors.New("bad id")), outcome.ClassPermanent, "envelope.bad_id"},
		{"wrapped permanent", fmt.Errorf("handle: %w", outcome.Permanentf("tenant.mismatch", "tenant %s", "t1")), outcome.ClassPermanent, "tenant.mismatch"},
		{"retryable", outcome.Retryable("provider.unavailable", nil), outcome.ClassRetryable, "provider.unavailable"},
		{"unmarked is retryable", context.DeadlineExceeded, outcome.ClassRetryable, "unclassified"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			t.Parallel()
			class, code := outcome.Of(tt.err)
			require.Equal(t, tt.wantClass, class)
			require.Equal(t, tt.wantCode, code)
			require.Equal(t, tt.wantClass == outcome.ClassPermanent, outcome.IsPermanent(tt.err))
		})
	}
	require.False(t, outcome.IsPermanent(nil))
	require.ErrorIs(t, outcome.Permanent("x", context.Canceled), context.Canceled)
}
