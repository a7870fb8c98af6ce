package e2e

// A tiny authoritative DNS server on loopback and a Caddy DNS provider
// module that writes to it, so that the ACME DNS-01 challenge (the only
// way to get a wildcard certificate) runs offline. Test code only: the
// module is registered by this _test.go file, so it exists in the e2e test
// binary and in no build of the gateway.

import (
	"context"
	"fmt"
	"net"
	"strings"
	"sync"
	"testing"

	"github.com/caddyserver/caddy/v2"
	"github.com/caddyserver/caddy/v2/caddyconfig/caddyfile"
	"github.com/caddyserver/certmagic"
	"github.com/libdns/libdns"
	"github.com/miekg/dns"
)

func init() { caddy.RegisterModule(new(testDNSProvider)) }

// dnsServers maps the address of each running testDNS to it, so that the
// provider module, configured with that address, finds its server.
var dnsServers sync.Map // "127.0.0.1:port" -> *testDNS

// testDNS answers authoritatively for one zone: SOA at the apex (certmagic
// finds the zone with SOA queries), A with 127.0.0.1 for every name (Pebble
// resolves the names it validates through it), and TXT records from a
// table the provider edits. Names outside the zone are refused.
type testDNS struct {
	zone string // lowercase FQDN, "example.test."
	addr string

	mu      sync.Mutex
	txt     map[string][]string // lowercase FQDN -> values
	changes []string            // "+name value" / "-name", in order

	udp, tcp *dns.Server
}

// startTestDNS serves zone on a free loopback port, over UDP and TCP (the
// Pebble validator asks over TCP, certmagic over UDP).
func startTestDNS(t *testing.T, zone string) *testDNS {
	t.Helper()
	s := &testDNS{zone: dns.Fqdn(strings.ToLower(zone)), txt: map[string][]string{}}
	mux := dns.NewServeMux()
	mux.HandleFunc(".", s.answer)
	var lastErr error
	for range 20 {
		pc, err := net.ListenPacket("udp", "127.0.0.1:0")
		if err != nil {
			t.Fatal(err)
		}
		addr := pc.LocalAddr().String()
		ln, err := net.Listen("tcp", addr)
		if err != nil { // the TCP twin of the port is taken; try another
			pc.Close()
			lastErr = err
			continue
		}
		s.addr = addr
		s.udp = &dns.Server{PacketConn: pc, Handler: mux}
		s.tcp = &dns.Server{Listener: ln, Handler: mux}
		go func() { _ = s.udp.ActivateAndServe() }()
		go func() { _ = s.tcp.ActivateAndServe() }()
		dnsServers.Store(addr, s)
		t.Cleanup(func() {
			dnsServers.Delete(addr)
			_ = s.udp.Shutdown()
			_ = s.tcp.Shutdown()
		})
		return s
	}
	t.Fatalf("no free UDP+TCP port pair for the test DNS server: %v", lastErr)
	return nil
}

func (s *testDNS) setTXT(name, value string) {
	s.mu.Lock()
	defer s.mu.Unlock()
	k := dns.Fqdn(strings.ToLower(name))
	s.txt[k] = append(s.txt[k], value)
	s.changes = append(s.changes, "+"+k+" "+value)
}

func (s *testDNS) clearTXT(name string) {
	s.mu.Lock()
	defer s.mu.Unlock()
	k := dns.Fqdn(strings.ToLower(name))
	delete(s.txt, k)
	s.changes = append(s.changes, "-"+k)
}

// history returns the TXT changes the provider made, in order.
func (s *testDNS) history() []string {
	s.mu.Lock()
	defer s.mu.Unlock()
	return append([]string(nil), s.changes...)
}

func (s *testDNS) inZone(name string) bool {
	return name == s.zone || strings.HasSuffix(name, "."+s.zone)
}

func (s *testDNS) soa() *dns.SOA {
	return &dns.SOA{
		Hdr:     dns.RR_Header{Name: s.zone, Rrtype: dns.TypeSOA, Class: dns.ClassINET, Ttl: 1},
		Ns:      "ns1." + s.zone,
		Mbox:    "hostmaster." + s.zone,
		Serial:  1,
		Refresh: 60, Retry: 60, Expire: 600, Minttl: 1,
	}
}

func (s *testDNS) answer(w dns.ResponseWriter, req *dns.Msg) {
	resp := new(dns.Msg)
	resp.SetReply(req)
	resp.Authoritative = true
	for _, q := range req.Question {
		name := strings.ToLower(q.Name)
		if !s.inZone(name) {
			resp.Rcode = dns.RcodeRefused
			continue
		}
		hdr := dns.RR_Header{Name: q.Name, Rrtype: q.Qtype, Class: dns.ClassINET, Ttl: 1}
		var found []dns.RR
		switch q.Qtype {
		case dns.TypeSOA:
			if name == s.zone {
				found = append(found, s.soa())
			}
		case dns.TypeNS:
			if name == s.zone {
				found = append(found, &dns.NS{Hdr: hdr, Ns: "ns1." + s.zone})
			}
		case dns.TypeA:
			found = append(found, &dns.A{Hdr: hdr, A: net.IPv4(127, 0, 0, 1)})
		case dns.TypeTXT:
			s.mu.Lock()
			for _, v := range s.txt[name] {
				found = append(found, &dns.TXT{Hdr: hdr, Txt: []string{v}})
			}
			s.mu.Unlock()
		}
		if len(found) == 0 {
			// NOERROR with no data: the name exists, the type does not.
			resp.Ns = append(resp.Ns, s.soa())
		}
		resp.Answer = append(resp.Answer, found...)
	}
	_ = w.WriteMsg(resp)
}

// testDNSProvider is the Caddy module dns.providers.queen_testdns, a libdns
// provider that edits the TXT records of the testDNS at Server. Caddyfile:
//
//	dns queen_testdns <server address>
type testDNSProvider struct {
	Server string `json:"server,omitempty"`
}

func (*testDNSProvider) CaddyModule() caddy.ModuleInfo {
	return caddy.ModuleInfo{ID: "dns.providers.queen_testdns", New: func() caddy.Module { return new(testDNSProvider) }}
}

func (p *testDNSProvider) UnmarshalCaddyfile(d *caddyfile.Dispenser) error {
	d.Next() // the provider name
	if !d.AllArgs(&p.Server) {
		return d.ArgErr()
	}
	return nil
}

func (p *testDNSProvider) server() (*testDNS, error) {
	s, ok := dnsServers.Load(p.Server)
	if !ok {
		return nil, fmt.Errorf("queen_testdns: no test DNS server at %s", p.Server)
	}
	return s.(*testDNS), nil
}

func (p *testDNSProvider) AppendRecords(_ context.Context, zone string, recs []libdns.Record) ([]libdns.Record, error) {
	s, err := p.server()
	if err != nil {
		return nil, err
	}
	for _, r := range recs {
		rr := r.RR()
		if rr.Type != "TXT" {
			return nil, fmt.Errorf("queen_testdns: only TXT records are supported, got %s", rr.Type)
		}
		s.setTXT(libdns.AbsoluteName(rr.Name, zone), rr.Data)
	}
	return recs, nil
}

func (p *testDNSProvider) DeleteRecords(_ context.Context, zone string, recs []libdns.Record) ([]libdns.Record, error) {
	s, err := p.server()
	if err != nil {
		return nil, err
	}
	for _, r := range recs {
		s.clearTXT(libdns.AbsoluteName(r.RR().Name, zone))
	}
	return recs, nil
}

var (
	_ certmagic.DNSProvider = (*testDNSProvider)(nil)
	_ caddyfile.Unmarshaler = (*testDNSProvider)(nil)
)
