package caddymodule

import (
	"encoding/json"
	"strings"
	"testing"

	"github.com/caddyserver/caddy/v2/caddyconfig"
	"github.com/caddyserver/caddy/v2/caddyconfig/caddyfile"
)

// adaptCaddyfile adapts a Caddyfile to JSON and decodes it generically.
func adaptCaddyfile(t *testing.T, input string) (map[string]any, error) {
	t.Helper()
	out, _, err := caddyconfig.GetAdapter("caddyfile").Adapt([]byte(input), nil)
	if err != nil {
		return nil, err
	}
	var cfg map[string]any
	if err := json.Unmarshal(out, &cfg); err != nil {
		t.Fatal(err)
	}
	return cfg, nil
}

// dig follows object keys through a decoded JSON document.
func dig(v any, keys ...string) any {
	for _, k := range keys {
		m, ok := v.(map[string]any)
		if !ok {
			return nil
		}
		v = m[k]
	}
	return v
}

// findHandlerJSON returns the first HTTP handler object named handler
// anywhere in a decoded config.
func findHandlerJSON(v any, handler string) map[string]any {
	switch v := v.(type) {
	case map[string]any:
		if v["handler"] == handler {
			return v
		}
		for _, child := range v {
			if h := findHandlerJSON(child, handler); h != nil {
				return h
			}
		}
	case []any:
		for _, child := range v {
			if h := findHandlerJSON(child, handler); h != nil {
				return h
			}
		}
	}
	return nil
}

func TestPermissionCaddyfileGlobalOption(t *testing.T) {
	cfg, err := adaptCaddyfile(t, `{
	on_demand_tls {
		permission queen
	}
	queen {
		database_url {env.QUEENGATE_DATABASE_URL}
		base_domain eu1.example.com
	}
}
https:// {
	tls {
		on_demand
	}
	queen_gateway
}`)
	if err != nil {
		t.Fatal(err)
	}
	perm := dig(cfg, "apps", "tls", "automation", "on_demand", "permission")
	if dig(perm, "module") != "queen" {
		t.Fatalf("on_demand permission %v, want module queen", perm)
	}

	for _, tc := range []struct{ input, want string }{
		{"{\n\ton_demand_tls {\n\t\tpermission queen eu1.example.com\n\t}\n}\n:80\n", "permission queen takes no arguments"},
		{"{\n\ton_demand_tls {\n\t\tpermission queen {\n\t\t\tbase_domain x\n\t\t}\n\t}\n}\n:80\n", "permission queen takes no options"},
	} {
		if _, err := adaptCaddyfile(t, tc.input); err == nil || !strings.Contains(err.Error(), tc.want) {
			t.Errorf("adapt %q: err = %v, want it to contain %q", tc.input, err, tc.want)
		}
	}
}

func TestPermissionUnmarshalCaddyfile(t *testing.T) {
	if err := new(CertPermission).UnmarshalCaddyfile(caddyfile.NewTestDispenser(`queen`)); err != nil {
		t.Fatal(err)
	}
	if err := new(CertPermission).UnmarshalCaddyfile(caddyfile.NewTestDispenser(`queen extra`)); err == nil {
		t.Fatal("an argument was accepted")
	}
}

func TestTLSCellOptionConfiguresTheTransport(t *testing.T) {
	cfg, err := adaptCaddyfile(t, `{
	queen {
		database_url {env.QUEENGATE_DATABASE_URL}
	}
}
http://*.eu1.example.com {
	queen_gateway {
		dial_timeout 2s
		cell_tls {
			ca /etc/queengate/cells-ca.pem /etc/queengate/old-ca.pem
			server_name cells.queen.internal
		}
	}
}`)
	if err != nil {
		t.Fatal(err)
	}
	proxy := findHandlerJSON(cfg, "reverse_proxy")
	if proxy == nil {
		t.Fatal("no reverse_proxy in the adapted config")
	}
	tlsCfg := dig(proxy, "transport", "tls")
	if dig(tlsCfg, "server_name") != "cells.queen.internal" || dig(tlsCfg, "ca", "provider") != "file" {
		t.Fatalf("transport tls %v", tlsCfg)
	}
	files, _ := dig(tlsCfg, "ca", "pem_files").([]any)
	if len(files) != 2 || files[0] != "/etc/queengate/cells-ca.pem" || files[1] != "/etc/queengate/old-ca.pem" {
		t.Fatalf("ca pem_files %v", files)
	}
	if dig(proxy, "dynamic_upstreams", "cells_tls") != true {
		t.Fatalf("dynamic upstreams %v, want cells_tls", dig(proxy, "dynamic_upstreams"))
	}
	if v, _ := dig(proxy, "transport", "versions").([]any); len(v) != 1 || v[0] != "1.1" {
		t.Fatalf("transport versions %v, want [1.1]", v)
	}

	// A bare cell_tls trusts the system roots and verifies the cell URL's host.
	cfg, err = adaptCaddyfile(t, "{\n\tqueen {\n\t\tdatabase_url x\n\t}\n}\nhttp:// {\n\tqueen_gateway {\n\t\tcell_tls\n\t}\n}\n")
	if err != nil {
		t.Fatal(err)
	}
	proxy = findHandlerJSON(cfg, "reverse_proxy")
	if tlsCfg, ok := dig(proxy, "transport", "tls").(map[string]any); !ok || len(tlsCfg) != 0 {
		t.Fatalf("bare cell_tls: transport tls %v, want an empty object", dig(proxy, "transport", "tls"))
	}

	// Without cell_tls: plain http cells.
	cfg, err = adaptCaddyfile(t, "{\n\tqueen {\n\t\tdatabase_url x\n\t}\n}\nhttp:// {\n\tqueen_gateway\n}\n")
	if err != nil {
		t.Fatal(err)
	}
	proxy = findHandlerJSON(cfg, "reverse_proxy")
	if dig(proxy, "transport", "tls") != nil || dig(proxy, "dynamic_upstreams", "cells_tls") != nil {
		t.Fatalf("no cell_tls, yet transport %v upstreams %v", dig(proxy, "transport"), dig(proxy, "dynamic_upstreams"))
	}
}

func TestTLSCellOptionErrors(t *testing.T) {
	for _, tc := range []struct{ input, want string }{
		{"queen_gateway {\n\tcell_tls on\n}", "queen_gateway: cell_tls takes no arguments"},
		{"queen_gateway {\n\tcell_tls {\n\t\tca\n\t}\n}", "queen_gateway: cell_tls: ca needs at least one PEM file, at Testfile:3"},
		{"queen_gateway {\n\tcell_tls {\n\t\tserver_name a b\n\t}\n}", "server_name takes exactly one name"},
		{"queen_gateway {\n\tcell_tls {\n\t\tinsecure_skip_verify\n\t}\n}", `queen_gateway: cell_tls: unknown option "insecure_skip_verify"`},
	} {
		err := new(Gateway).UnmarshalCaddyfile(caddyfile.NewTestDispenser(tc.input))
		if err == nil || !strings.Contains(err.Error(), tc.want) {
			t.Errorf("%q: err = %v, want it to contain %q", tc.input, err, tc.want)
		}
	}
	// Options after the cell_tls block are still read.
	g := new(Gateway)
	if err := g.UnmarshalCaddyfile(caddyfile.NewTestDispenser("queen_gateway {\n\tcell_tls {\n\t\tserver_name x\n\t}\n\tupstream_timeout 7s\n}")); err != nil || g.UpstreamTimeout == 0 {
		t.Fatalf("err %v, upstream_timeout %v", err, g.UpstreamTimeout)
	}
}

func TestTLSCellAddressMatchesTheTransport(t *testing.T) {
	overTLS := map[string]string{
		"https://cell-1.cells.example.com":      "cell-1.cells.example.com:443",
		"https://127.0.0.1:6633":                "127.0.0.1:6633",
		"https://[::1]/":                        "[::1]:443",
		"https://cell-1.cells.example.com:8443": "cell-1.cells.example.com:8443",
	}
	for in, want := range overTLS {
		if got, err := cellAddress(in, true); err != nil || got != want {
			t.Errorf("cellAddress(%q, tls) = %q, %v; want %q", in, got, err, want)
		}
	}
	for _, tc := range []struct {
		url     string
		overTLS bool
		want    string
	}{
		{"https://cell:443", false, "no cell_tls option"},
		{"http://cell:6632", true, "not an https cell"},
		{"ftp://cell", true, "not an https cell"},
		{"ftp://cell", false, "only http:// and https://"},
		{"https://", true, "has no host"},
	} {
		if _, err := cellAddress(tc.url, tc.overTLS); err == nil || !strings.Contains(err.Error(), tc.want) {
			t.Errorf("cellAddress(%q, %v): err = %v, want it to contain %q", tc.url, tc.overTLS, err, tc.want)
		}
	}
	if got, err := cellAddress("http://broker.example.com", false); err != nil || got != "broker.example.com:80" {
		t.Errorf("plain cell: %q, %v", got, err)
	}
}
