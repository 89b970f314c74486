package provider

import (
	"errors"
	"net/http"
	"net/http/httptest"
	"net/netip"
	"net/url"
	"testing"
	"time"

	"github.com/stretchr/testify/require"
)

func TestPublicAddresses(t *testing.T) {
	t.Parallel()
	for _, c := range []struct {
		addr   string
		public bool
	}{
		{"8.8.8.8", true}, {"2606:4700::1111", true}, {"52.95.110.1", true},
		{"127.0.0.1", false}, {"::1", false}, {"10.1.2.3", false}, {"172.16.0.1", false}, {"192.168.1.1", false},
		{"169.254.169.254", false}, {"fe80::1", false}, {"fc00::1", false}, {"100.64.0.1", false},
		{"0.0.0.0", false}, {"0.1.2.3", false}, {"::", false}, {"224.0.0.1", false}, {"255.255.255.255", false},
	} {
		ip := netip.MustParseAddr(c.addr)
		require.Equal(t, c.public, public(ip), c.addr)
	}
	require.False(t, public(netip.MustParseAddr("::ffff:127.0.0.1").Unmap()), "an IPv4-mapped loopback")
}

// TestTheGuardRefusesPrivateAddressesAtConnect: the check is made on the
// address connected to, so a name that resolves to loopback is refused as
// well as the literal address; http and http redirects are refused.
func TestTheGuardRefusesPrivateAddressesAtConnect(t *testing.T) {
	t.Parallel()
	srv := httptest.NewTLSServer(http.HandlerFunc(func(w http.ResponseWriter, _ *http.Request) { _, _ = w.Write([]byte("x")) }))
	t.Cleanup(srv.Close)
	u, err := url.Parse(srv.URL)
	require.NoError(t, err)
	var g OutputGuard
	client := g.Client(nil)
	t.Cleanup(client.CloseIdleConnections)
	for _, host := range []string{u.Host, "localhost:" + u.Port()} {
		target, err := url.Parse("https://" + host + "/out.mp4")
		require.NoError(t, err)
		_, _, _, err = FetchOutput(t.Context(), FetchParams{Op: "download output", HTTP: client, URL: target, HeaderTimeout: 5 * time.Second, Guard: g})
		var r *RefusedError
		require.True(t, errors.As(err, &r), "%s: %v", host, err)
		require.Equal(t, CodePrivateOutputAddress, r.Code, host)
		require.Contains(t, r.Message, "not a public address")
	}

	plain, err := url.Parse("http://example.com/out.mp4")
	require.NoError(t, err)
	_, _, _, err = FetchOutput(t.Context(), FetchParams{Op: "download output", HTTP: client, URL: plain, HeaderTimeout: time.Second, Guard: g})
	var r *RefusedError
	require.True(t, errors.As(err, &r), "%v", err)
	require.Equal(t, CodeInsecureOutputURL, r.Code)

	redirect, err := http.NewRequestWithContext(t.Context(), http.MethodGet, "http://example.com/elsewhere", nil)
	require.NoError(t, err)
	err = client.CheckRedirect(redirect, []*http.Request{{}})
	require.True(t, errors.As(err, &r), "%v", err)
	require.Equal(t, CodeInsecureOutputURL, r.Code, "a redirect to http")

	local := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, _ *http.Request) { _, _ = w.Write([]byte("x")) }))
	t.Cleanup(local.Close)
	lu, err := url.Parse(local.URL)
	require.NoError(t, err)
	lenient := OutputGuard{AllowPrivate: true}
	allowed := lenient.Client(nil)
	t.Cleanup(allowed.CloseIdleConnections)
	out, status, _, err := FetchOutput(t.Context(), FetchParams{Op: "download output", HTTP: allowed, URL: lu, HeaderTimeout: 5 * time.Second, Guard: lenient})
	require.NoError(t, err, "AllowPrivate reaches the local simulators")
	require.Equal(t, http.StatusOK, status)
	require.NoError(t, out.Body.Close())
}
