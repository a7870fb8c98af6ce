package e2e

import (
	"encoding/json"
	"os"
	"slices"
	"strings"
	"testing"

	"github.com/caddyserver/caddy/v2/caddyconfig"
)

// TestTLSProductionExampleAdapts uncomments the production HTTPS setup at
// the end of Caddyfile.example, puts the test DNS provider in place of
// <provider>, and checks that it adapts to what docs/tls.md describes: a
// DNS-01 wildcard policy for *.eu1.example.com, on-demand issuance gated
// by the queen permission module for everything else, and both sites
// served by queen_gateway.
func TestTLSProductionExampleAdapts(t *testing.T) {
	raw, err := os.ReadFile("../Caddyfile.example")
	if err != nil {
		t.Fatal(err)
	}
	_, block, ok := strings.Cut(string(raw), "\n# Production HTTPS")
	if !ok {
		t.Fatal(`Caddyfile.example has no "# Production HTTPS" section`)
	}
	var lines []string
	started := false
	for _, line := range strings.Split(block, "\n") {
		if line == "# {" {
			started = true
		}
		if !started || !strings.HasPrefix(line, "#") {
			continue
		}
		lines = append(lines, strings.TrimPrefix(strings.TrimPrefix(line, "#"), " "))
	}
	caddyfile := strings.ReplaceAll(strings.Join(lines, "\n"), "dns <provider> {env.DNS_API_TOKEN}", "dns queen_testdns 127.0.0.1:1")
	if !strings.Contains(caddyfile, "dns queen_testdns") {
		t.Fatalf("no `dns <provider> {env.DNS_API_TOKEN}` line to replace in:\n%s", caddyfile)
	}
	out, _, err := caddyconfig.GetAdapter("caddyfile").Adapt([]byte(caddyfile), nil)
	if err != nil {
		t.Fatalf("the production example does not adapt: %v\n%s", err, caddyfile)
	}

	var cfg struct {
		Apps struct {
			TLS struct {
				Automation struct {
					Policies []struct {
						Subjects []string `json:"subjects"`
						OnDemand bool     `json:"on_demand"`
						Issuers  []struct {
							Module     string `json:"module"`
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
	auto := cfg.Apps.TLS.Automation
	if auto.OnDemand.Permission.Module != "queen" {
		t.Errorf("on-demand permission module %q, want queen", auto.OnDemand.Permission.Module)
	}
	var wildcard, onDemand bool
	for _, p := range auto.Policies {
		switch {
		case slices.Equal(p.Subjects, []string{"*.eu1.example.com"}):
			wildcard = !p.OnDemand && len(p.Issuers) > 0 &&
				p.Issuers[0].Module == "acme" && p.Issuers[0].Challenges.DNS.Provider.Name == "queen_testdns" &&
				p.Issuers[0].Email == "ops@example.com"
		case len(p.Subjects) == 0:
			onDemand = p.OnDemand
		}
	}
	if !wildcard || !onDemand {
		t.Errorf("policies: DNS-01 wildcard for *.eu1.example.com %v, catch-all on-demand %v; want both\n%s", wildcard, onDemand, out)
	}
	if n := strings.Count(string(out), `"handler":"queen_gateway"`); n != 2 {
		t.Errorf("%d queen_gateway handlers, want one per site", n)
	}
}
