package e2e

import (
	"encoding/json"
	"os"
	"slices"
	"strings"
	"testing"

	"github.com/caddyserver/caddy/v2/caddyconfig"
)

// The two lines of Caddyfile.production.example that name services outside
// the gateway, and that its tests replace: the ACME CA (Let's Encrypt) and
// the DNS provider module of the operator's DNS host.
const (
	productionCALine  = "\tacme_ca https://acme-v02.api.letsencrypt.org/directory\n"
	productionDNSLine = "dns <provider> {env.DNS_API_TOKEN}"
)

// productionExample returns Caddyfile.production.example with its CA line
// and its DNS provider line replaced, and nothing else changed. An empty
// replacement keeps that line as it is.
func productionExample(t *testing.T, caLines, dnsLines string) string {
	t.Helper()
	raw, err := os.ReadFile("../Caddyfile.production.example")
	if err != nil {
		t.Fatal(err)
	}
	out := string(raw)
	for _, sub := range []struct{ line, with string }{{productionCALine, caLines}, {productionDNSLine, dnsLines}} {
		if n := strings.Count(out, sub.line); n != 1 {
			t.Fatalf("Caddyfile.production.example has %d lines %q, want exactly 1 to replace", n, sub.line)
		}
		if sub.with != "" {
			out = strings.Replace(out, sub.line, sub.with, 1)
		}
	}
	return out
}

// TestTLSProductionExampleAdapts adapts Caddyfile.production.example with
// the test DNS provider in place of <provider> (and its defaults for every
// environment variable) and checks that it is what docs/tls.md describes:
// a DNS-01 wildcard policy for *.eu1.example.com from Let's Encrypt,
// on-demand issuance gated by the queen permission module for everything
// else, certificates in the state directory, and both sites served by
// queen_gateway.
func TestTLSProductionExampleAdapts(t *testing.T) {
	for _, v := range []string{"QUEENGATE_BASE_DOMAIN", "QUEENGATE_ONDEMAND_DOMAIN", "QUEENGATE_ACME_EMAIL", "QUEENGATE_STATE_DIR",
		"QUEENGATE_LEADER_GROUP", "QUEENGATE_CELL", "QUEENGATE_PRIVATE_ADDRESS", "QUEENGATE_OPERATOR_HOST", "QUEENGATE_PROBE_PORT", "QUEENGATE_METRICS_PORT", "QUEENGATE_LOG_LEVEL"} {
		unsetEnv(t, v) // the file's defaults apply
	}
	caddyfile := productionExample(t, "", "dns queen_testdns 127.0.0.1:1")
	adapt := func() ([]byte, []caddyconfig.Warning, error) {
		return caddyconfig.GetAdapter("caddyfile").Adapt([]byte(caddyfile), map[string]any{"filename": "Caddyfile.production.example"})
	}
	// The member's name and peer address have no default: two members
	// left with one name would be one member to the lease.
	for _, required := range []string{"QUEENGATE_GATEWAY_NAME", "QUEENGATE_PEER_LISTEN"} {
		t.Run("without "+required, func(t *testing.T) {
			t.Setenv("QUEENGATE_GATEWAY_NAME", "eu1-a-gw1")
			t.Setenv("QUEENGATE_PEER_LISTEN", "192.0.2.11:7946")
			unsetEnv(t, required)
			if _, _, err := adapt(); err == nil {
				t.Fatalf("the production example adapts without %s", required)
			}
		})
	}
	t.Setenv("QUEENGATE_GATEWAY_NAME", "eu1-a-gw1")
	t.Setenv("QUEENGATE_PEER_LISTEN", "192.0.2.11:7946")
	out, warnings, err := adapt()
	if err != nil {
		t.Fatalf("the production example does not adapt: %v\n%s", err, caddyfile)
	}
	for _, w := range warnings { // "input is not formatted" among them: caddy fmt
		t.Errorf("Caddyfile warning: %s", w.String())
	}
	// Production names the cell its group fronts.
	if !strings.Contains(string(out), `"cells":["eu1-a"]`) {
		t.Errorf("the production example does not name the cell it fronts: %s", out)
	}

	var cfg struct {
		Storage struct {
			Module string `json:"module"`
			Root   string `json:"root"`
		} `json:"storage"`
		Apps struct {
			TLS struct {
				Automation struct {
					Policies []struct {
						Subjects []string `json:"subjects"`
						OnDemand bool     `json:"on_demand"`
						Issuers  []struct {
							Module     string `json:"module"`
							CA         string `json:"ca"`
							Email      string `json:"email"`
							Challenges struct {
								DNS struct {
									Provider struct {
										Name string `json:"name"`
									} `json:"provider"`
								} `json:"dns"`
							} `json:"challenges"`
						} `json:"issuers"`
					} `json:"policies"`
					OnDemand struct {
						Permission struct {
							Module string `json:"module"`
						} `json:"permission"`
					} `json:"on_demand"`
				} `json:"automation"`
			} `json:"tls"`
		} `json:"apps"`
	}
	if err := json.Unmarshal(out, &cfg); err != nil {
		t.Fatal(err)
	}
	if cfg.Storage.Module != "file_system" || cfg.Storage.Root != "/var/lib/queengate" {
		t.Errorf("storage %+v, want file_system in /var/lib/queengate", cfg.Storage)
	}
	auto := cfg.Apps.TLS.Automation
	if auto.OnDemand.Permission.Module != "queen" {
		t.Errorf("on-demand permission module %q, want queen", auto.OnDemand.Permission.Module)
	}
	const letsEncrypt = "https://acme-v02.api.letsencrypt.org/directory"
	var wildcard, onDemand bool
	for _, p := range auto.Policies {
		switch {
		case slices.Equal(p.Subjects, []string{"*.eu1.example.com"}):
			wildcard = !p.OnDemand && len(p.Issuers) == 1 &&
				p.Issuers[0].Module == "acme" && p.Issuers[0].Challenges.DNS.Provider.Name == "queen_testdns" &&
				p.Issuers[0].Email == "ops@example.com" && p.Issuers[0].CA == letsEncrypt
		case len(p.Subjects) == 0:
			onDemand = p.OnDemand && len(p.Issuers) == 1 && p.Issuers[0].CA == letsEncrypt
		}
	}
	if !wildcard || !onDemand {
		t.Errorf("policies: DNS-01 wildcard for *.eu1.example.com %v, catch-all on-demand %v; want both from %s\n%s", wildcard, onDemand, letsEncrypt, out)
	}
	if n := strings.Count(string(out), `"handler":"queen_gateway"`); n != 4 {
		t.Errorf("%d queen_gateway handlers, want one per public site, the operators' and the probe listener's", n)
	}
	// The operators' console: the operator routes and API on, and a site
	// of its own outside the base domains that names no cluster and serves
	// no data plane.
	for _, want := range []string{`"operator_enabled":true`, `"operator_api":true`, `"host":["ops.example.com"]`,
		`{"console_only":true,"handler":"queen_gateway","shared_hosts":["ops.example.com"]}`} {
		if !strings.Contains(string(out), want) {
			t.Errorf("the production example lacks %s for the operators' console:\n%s", want, out)
		}
	}
	for _, want := range []string{`"base_domains":["eu1.example.com","eu2.example.com"]`, `"spool_dir":"/var/lib/queengate/spool"`,
		`"ed25519_key_file":"/etc/queengate/session-ed25519.pem"`, `"identity":{`,
		`"leader_group":"eu1-a"`, `"gateway_name":"eu1-a-gw1"`, `"leader_group_members":["eu1-a-gw1","eu1-a-gw2"]`,
		`"peer_listen":"192.0.2.11:7946"`, `"peer_secret":"{env.QUEENGATE_PEER_SECRET}"`} {
		if !strings.Contains(string(out), want) {
			t.Errorf("the queen app lacks %s:\n%s", want, out)
		}
	}

	// The probe and the metrics listener: plain HTTP on the private address
	// (loopback by default), each serving its one purpose.
	var servers struct {
		Apps struct {
			HTTP struct {
				Servers map[string]struct {
					Listen []string          `json:"listen"`
					Routes []json.RawMessage `json:"routes"`
				} `json:"servers"`
			} `json:"http"`
		} `json:"apps"`
		Logging struct {
			Logs map[string]struct {
				Encoder struct {
					Format string `json:"format"`
				} `json:"encoder"`
				Level string `json:"level"`
			} `json:"logs"`
		} `json:"logging"`
	}
	if err := json.Unmarshal(out, &servers); err != nil {
		t.Fatal(err)
	}
	listeners := map[string]string{}
	for _, srv := range servers.Apps.HTTP.Servers {
		routes, _ := json.Marshal(srv.Routes)
		for _, l := range srv.Listen {
			listeners[l] = string(routes)
		}
	}
	for listen, want := range map[string]string{"127.0.0.1:8081": `"probes":true`, "127.0.0.1:9180": `"handler":"metrics"`} {
		routes, ok := listeners[listen]
		if !ok {
			t.Errorf("no server listens on %s: %v", listen, listeners)
			continue
		}
		if !strings.Contains(routes, want) {
			t.Errorf("the server on %s lacks %s: %s", listen, want, routes)
		}
	}
	if def := servers.Logging.Logs["default"]; def.Encoder.Format != "json" || def.Level != "INFO" {
		t.Errorf("default log %+v, want JSON at INFO", def)
	}
	if n := strings.Count(string(out), `"key":"queen_request_id","value":"{http.vars.queen.request_id}"`); n < 2 {
		t.Errorf("%d public sites append the request id to their access log, want both:\n%s", n, out)
	}
}

// unsetEnv unsets name for the rest of the test (t.Setenv restores it).
func unsetEnv(t *testing.T, name string) {
	t.Helper()
	if _, set := os.LookupEnv(name); set {
		t.Setenv(name, "")
		os.Unsetenv(name)
	}
}
