package harden

import (
	"context"
	"fmt"
	"net"
	"net/http"
	"net/netip"
	"net/url"
	"strings"
	"syscall"
	"time"
)

// OutboundAllowed says whether the gateway may connect to ip on an
// operator's behalf (webhooks, usage export). The URLs are the operator's,
// but what a name resolves to can change after it was configured, so the
// address is checked at every
// connection, after resolution: never the unspecified address, multicast
// or broadcast, never link-local (where cloud instance metadata answers),
// and loopback only when allowed (on a
// gateway, loopback reaches the gateway's own admin and peer endpoints).
// Private networks are allowed: billing and alerting systems live there.
func OutboundAllowed(ip netip.Addr, allowLoopback bool) error {
	ip = ip.Unmap()
	switch {
	case !ip.IsValid(), ip.IsUnspecified():
		return fmt.Errorf("address %s is unspecified", ip)
	case ip.IsMulticast(), ip == netip.AddrFrom4([4]byte{255, 255, 255, 255}):
		return fmt.Errorf("address %s is multicast or broadcast", ip)
	case ip.IsLinkLocalUnicast(), ip.IsLinkLocalMulticast():
		return fmt.Errorf("address %s is link-local (instance metadata lives there)", ip)
	case ip.IsLoopback() && !allowLoopback:
		return fmt.Errorf("address %s is loopback (allowed only with allow_loopback)", ip)
	}
	return nil
}

// NewOutboundClient is the HTTP client for calls to operator-configured
// URLs: no proxy from the environment (the guard must see the real
// destination), no redirects followed (a 3xx is a failure: the operator's
// URL is the only place a call goes), every dialled address checked by
// OutboundAllowed.
func NewOutboundClient(timeout time.Duration, allowLoopback bool) *http.Client {
	d := &net.Dialer{
		Timeout: timeout,
		Control: func(_, address string, _ syscall.RawConn) error {
			ap, err := netip.ParseAddrPort(address)
			if err != nil {
				return fmt.Errorf("outbound dial %q: %w", address, err)
			}
			if err := OutboundAllowed(ap.Addr(), allowLoopback); err != nil {
				return fmt.Errorf("refused to connect: %w", err)
			}
			return nil
		},
	}
	return &http.Client{
		Timeout: timeout,
		Transport: &http.Transport{
			Proxy: nil,
			DialContext: func(ctx context.Context, network, addr string) (net.Conn, error) {
				return d.DialContext(ctx, network, addr)
			},
			ForceAttemptHTTP2:     true,
			MaxIdleConnsPerHost:   2,
			IdleConnTimeout:       90 * time.Second,
			TLSHandshakeTimeout:   timeout,
			ResponseHeaderTimeout: timeout,
		},
		CheckRedirect: func(*http.Request, []*http.Request) error { return http.ErrUseLastResponse },
	}
}

// CheckOutboundURL refuses a URL the gateway would not call for an
// operator (a webhook endpoint, a usage receiver): anything
// but an absolute http or https URL with a host, and URLs with user
// information (a password in a URL ends up in logs and listings) or a
// fragment.
func CheckOutboundURL(raw string) error {
	u, err := url.Parse(raw)
	if err != nil {
		return fmt.Errorf("URL %q does not parse: %w", raw, err)
	}
	switch {
	case u.Scheme != "http" && u.Scheme != "https":
		return fmt.Errorf("URL %q must start with https:// or http://", raw)
	case u.Host == "" || u.Hostname() == "":
		return fmt.Errorf("URL %q has no host", raw)
	case u.User != nil:
		return fmt.Errorf("URL %q carries user information; put credentials in the receiver's check of the signature instead", raw)
	case u.Fragment != "" || strings.Contains(raw, "#"):
		return fmt.Errorf("URL %q has a fragment", raw)
	case strings.ContainsAny(raw, " \t\r\n"):
		return fmt.Errorf("URL %q contains white space", raw)
	}
	return nil
}
