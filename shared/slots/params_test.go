package slots

import (
	"strings"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"
	"github.com/stretchr/testify/require"
)

// offlineLimiter never reaches Redis: every call below must be refused before
// a command is sent, which the unroutable address proves.
func offlineLimiter(t *testing.T) *Limiter {
	t.Helper()
	client := redis.NewClient(&redis.Options{Addr: "127.0.0.1:1", MaxRetries: -1, DialTimeout: 50 * time.Millisecond})
	t.Cleanup(func() { require.NoError(t, client.Close()) })
	return New(client, nil)
}

func TestAcquireRejectsBadParams(t *testing.T) {
	t.Parallel()
	l := offlineLimiter(t)
	good := Scope{Name: "tenant:1", Limit: 1}

	tests := []struct {
		name    string
		params  AcquireParams
		message string
	}{
		{"no scopes", AcquireParams{Holder: "h", TTL: time.Second}, "at least one scope"},
		{"empty name", AcquireParams{Scopes: []Scope{{Name: "", Limit: 1}}, Holder: "h", TTL: time.Second}, "scope name is empty"},
		{"space", AcquireParams{Scopes: []Scope{{Name: "tenant: 1", Limit: 1}}, Holder: "h", TTL: time.Second}, `has ' ' at byte 7`},
		{"tab", AcquireParams{Scopes: []Scope{{Name: "tenant:\t1", Limit: 1}}, Holder: "h", TTL: time.Second}, "whitespace"},
		{"newline", AcquireParams{Scopes: []Scope{{Name: "model:a\n", Limit: 1}}, Holder: "h", TTL: time.Second}, "whitespace"},
		{"non-breaking space", AcquireParams{Scopes: []Scope{{Name: "model:a\u00a0b", Limit: 1}}, Holder: "h", TTL: time.Second}, "whitespace"},
		{"brace", AcquireParams{Scopes: []Scope{{Name: "tenant:{1}", Limit: 1}}, Holder: "h", TTL: time.Second}, "braces"},
		{"invalid utf-8", AcquireParams{Scopes: []Scope{{Name: "tenant:\xff", Limit: 1}}, Holder: "h", TTL: time.Second}, "not allowed"},
		{"too long", AcquireParams{Scopes: []Scope{{Name: strings.Repeat("x", maxNameLen+1), Limit: 1}}, Holder: "h", TTL: time.Second}, "longer than 256 bytes"},
		{"zero limit", AcquireParams{Scopes: []Scope{{Name: "tenant:1"}}, Holder: "h", TTL: time.Second}, "limit 0 is below 1"},
		{"duplicate scope", AcquireParams{Scopes: []Scope{good, good}, Holder: "h", TTL: time.Second}, "given twice"},
		{"no holder", AcquireParams{Scopes: []Scope{good}, TTL: time.Second}, "holder is empty"},
		{"no ttl", AcquireParams{Scopes: []Scope{good}, Holder: "h"}, "under 1ms"},
		{"sub-millisecond ttl", AcquireParams{Scopes: []Scope{good}, Holder: "h", TTL: time.Microsecond}, "under 1ms"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			t.Parallel()
			_, err := l.Acquire(t.Context(), tt.params)
			require.ErrorIs(t, err, ErrInvalid)
			require.ErrorContains(t, err, tt.message)
			require.NotErrorIs(t, err, ErrNoSlot)
		})
	}
}

func TestOtherCallsRejectBadParams(t *testing.T) {
	t.Parallel()
	l := offlineLimiter(t)
	ctx := t.Context()

	_, err := l.InUse(ctx, "tenant 1")
	require.ErrorIs(t, err, ErrInvalid)
	require.ErrorContains(t, err, `"tenant 1"`)

	err = l.Rebuild(ctx, "", []string{"h"}, time.Second)
	require.ErrorIs(t, err, ErrInvalid)
	err = l.Rebuild(ctx, "tenant:1", []string{"h", ""}, time.Second)
	require.ErrorIs(t, err, ErrInvalid)
	require.ErrorContains(t, err, "holder is empty")
	err = l.Rebuild(ctx, "tenant:1", nil, 0)
	require.ErrorIs(t, err, ErrInvalid)

	valid := Lease{Holder: "h", Scopes: []string{"tenant:1"}, TTL: time.Second}
	for name, lease := range map[string]Lease{
		"no scopes":  {Holder: "h", TTL: time.Second},
		"bad scope":  {Holder: "h", Scopes: []string{"tenant:1", "model x"}, TTL: time.Second},
		"no holder":  {Scopes: valid.Scopes, TTL: time.Second},
		"zero value": {},
	} {
		require.ErrorIs(t, l.Renew(ctx, lease), ErrInvalid, name)
		require.ErrorIs(t, l.Release(ctx, lease), ErrInvalid, name)
	}
	require.ErrorIs(t, l.Renew(ctx, Lease{Holder: "h", Scopes: valid.Scopes}), ErrInvalid, "renew without a TTL")
}

func TestNewDefaultsKeyPrefix(t *testing.T) {
	t.Parallel()
	l := offlineLimiter(t)
	require.Equal(t, "aivedio:slots:tenant:1", l.key("tenant:1"))

	custom := New(l.client, &Opts{KeyPrefix: "{x}:"})
	require.Equal(t, "{x}:model:m", custom.key("model:m"))
}
