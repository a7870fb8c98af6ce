package caddymodule

import (
	"encoding/json"
	"strings"
	"testing"
	"time"

	"github.com/caddyserver/caddy/v2"
	"github.com/caddyserver/caddy/v2/caddyconfig"
	"github.com/caddyserver/caddy/v2/caddyconfig/caddyfile"
)

func TestAppUnmarshalCaddyfile(t *testing.T) {
	d := caddyfile.NewTestDispenser(`queen {
		database_url {env.DB}
		base_domain eu1.example.com eu2.example.com
		pool_max_conns 4
		database_timeout 2s
		cache_ttl 10s
		key_negative_ttl 1s
		stale_grace 1m
		skip_migrations
		isolation_probe_interval 5m
		quota_interval 2m
		leader_group eu1-a
		gateway_name gw-1
		leader_lease_ttl 3s
		leader_group_size 3
		leader_group_members gw-1 gw-2 gw-3
		peer_listen 192.0.2.5:7946
		peer_address http://gw-1.example.com:7946
		peer_secret {env.PEER}
	}`)
	var a App
	if err := a.UnmarshalCaddyfile(d); err != nil {
		t.Fatal(err)
	}
	if a.PeerListen != "192.0.2.5:7946" || a.PeerAddress != "http://gw-1.example.com:7946" || a.PeerSecret != "{env.PEER}" {
		t.Fatalf("peer options %q %q %q", a.PeerListen, a.PeerAddress, a.PeerSecret)
	}
	if a.DatabaseURL != "{env.DB}" || len(a.BaseDomains) != 2 || a.PoolMaxConns != 4 ||
		a.DatabaseTimeout != caddy.Duration(2*time.Second) || a.CacheTTL != caddy.Duration(10*time.Second) ||
		a.KeyNegativeTTL != caddy.Duration(time.Second) || a.StaleGrace != caddy.Duration(time.Minute) || !a.SkipMigrations ||
		a.IsolationProbeInterval != caddy.Duration(5*time.Minute) || a.QuotaInterval != caddy.Duration(2*time.Minute) || a.LeaderGroup != "eu1-a" || a.GatewayName != "gw-1" ||
		a.LeaderLeaseTTL != caddy.Duration(3*time.Second) || a.LeaderGroupSize != 3 ||
		strings.Join(a.LeaderGroupMembers, ",") != "gw-1,gw-2,gw-3" {
		t.Fatalf("parsed %+v", a)
	}
}

func TestAppUnmarshalAuthOptions(t *testing.T) {
	d := caddyfile.NewTestDispenser(`queen {
		database_url x
		operator_enabled
		key_touch_interval 5s
		session {
			issuer gw.example.com
			audience console
			ed25519_key_file /etc/queengate/session.pem
			ed25519_public_key_file /etc/queengate/session.pub
			hs256_secret {env.S}
			previous_ed25519_public_key_file /etc/queengate/session-old.pub
			previous_ed25519_public_key_file /etc/queengate/session-older.pub
			previous_hs256_secret {env.S_OLD}
			cookie_name qs
			ttl 12h
			revocation_strict
		}
		cell_token cell-1 {
			algorithm HS256
			secret {env.BROKER_JWT}
			issuer queengate
			audience queen
			role_claim roles
			ttl 2m
		}
		cell_token * {
			algorithm EdDSA
			key_file /etc/queengate/cell.pem
		}
	}`)
	var a App
	if err := a.UnmarshalCaddyfile(d); err != nil {
		t.Fatal(err)
	}
	s := a.Sessions
	if !a.OperatorEnabled || a.KeyTouchInterval != caddy.Duration(5*time.Second) || s == nil ||
		s.Issuer != "gw.example.com" || s.Audience != "console" || s.Ed25519KeyFile != "/etc/queengate/session.pem" ||
		s.Ed25519PublicKeyFile != "/etc/queengate/session.pub" || s.HS256Secret != "{env.S}" || s.CookieName != "qs" ||
		s.TTL != caddy.Duration(12*time.Hour) || !s.RevocationStrict ||
		strings.Join(s.PreviousEd25519PublicKeyFiles, ",") != "/etc/queengate/session-old.pub,/etc/queengate/session-older.pub" ||
		strings.Join(s.PreviousHS256Secrets, ",") != "{env.S_OLD}" {
		t.Fatalf("parsed %+v / %+v", a, s)
	}
	c1, all := a.CellTokens["cell-1"], a.CellTokens["*"]
	if c1 == nil || all == nil || c1.Algorithm != "HS256" || c1.Secret != "{env.BROKER_JWT}" || c1.Issuer != "queengate" ||
		c1.Audience != "queen" || c1.RoleClaim != "roles" || c1.TTL != caddy.Duration(2*time.Minute) ||
		all.Algorithm != "EdDSA" || all.KeyFile != "/etc/queengate/cell.pem" {
		t.Fatalf("cell tokens %+v %+v", c1, all)
	}
}

func TestGatewayUnmarshalEnforcementOptions(t *testing.T) {
	d := caddyfile.NewTestDispenser(`queen_gateway {
		shared_hosts shared.example.com api.example.com
		shield
		console_only
		max_uri_bytes 4KiB
		max_headers 50
		max_header_value_bytes 8KiB
		max_header_bytes 32KiB
		max_body_bytes 8MiB
		auth_failures 0.5 10
		probes
	}`)
	var g Gateway
	if err := g.UnmarshalCaddyfile(d); err != nil {
		t.Fatal(err)
	}
	if len(g.SharedHosts) != 2 || !g.Shield || g.MaxURIBytes != 4096 || g.MaxHeaders != 50 ||
		g.MaxHeaderValueBytes != 8192 || g.MaxHeaderBytes != 32768 || g.MaxBodyBytes != 8<<20 ||
		g.AuthFailureRate != 0.5 || g.AuthFailureBurst != 10 || !g.Probes || !g.ConsoleOnly {
		t.Fatalf("parsed %+v", g)
	}
}

func TestCaddyfileErrorsNameTheLine(t *testing.T) {
	cases := []struct {
		name, input, want string
		gateway           bool
	}{
		{"unknown app option", "queen {\n\tdatabse_url x\n}", `queen: unknown option "databse_url", at Testfile:2`, false},
		{"missing value", "queen {\n\tdatabase_url\n}", "at Testfile:2", false},
		{"bad pool size", "queen {\n\tpool_max_conns zero\n}", `pool_max_conns: "zero" is not a positive integer`, false},
		{"bad duration", "queen {\n\n\tcache_ttl soon\n}", `cache_ttl: "soon" is not a duration`, false},
		{"negative duration", "queen {\n\tstale_grace -1s\n}", "must not be negative", false},
		{"argument on option", "queen extra", "at Testfile:1", false},
		{"unknown gateway option", "queen_gateway {\n\tupstream_timout 1s\n}", `queen_gateway: unknown option "upstream_timout", at Testfile:2`, true},
		{"bad gateway duration", "queen_gateway {\n\tlong_poll_max forever\n}", `long_poll_max: "forever" is not a duration`, true},
		{"unknown session option", "queen {\n\tsession {\n\t\tisuer x\n\t}\n}", `session: unknown option "isuer", at Testfile:3`, false},
		{"previous key without file", "queen {\n\tsession {\n\t\tprevious_ed25519_public_key_file\n\t}\n}", "at Testfile:3", false},
		{"previous key empty", "queen {\n\tsession {\n\t\tprevious_ed25519_public_key_file \"\"\n\t}\n}",
			"previous_ed25519_public_key_file needs a PEM file, at Testfile:3", false},
		{"previous secret empty", "queen {\n\tsession {\n\t\tprevious_hs256_secret \"\"\n\t}\n}",
			"previous_hs256_secret needs a secret, at Testfile:3", false},
		{"session twice", "queen {\n\tsession {\n\t}\n\tsession {\n\t}\n}", "session given twice, at Testfile:4", false},
		{"cell token without algorithm", "queen {\n\tcell_token c1 {\n\t\tsecret s\n\t}\n}", "algorithm is required", false},
		{"cell token bad algorithm", "queen {\n\tcell_token c1 {\n\t\talgorithm RS256\n\t}\n}", `algorithm must be HS256 or EdDSA, got "RS256", at Testfile:3`, false},
		{"cell token without cell", "queen {\n\tcell_token {\n\t}\n}", "at Testfile:2", false},
		{"bad size", "queen_gateway {\n\tmax_body_bytes lots\n}", `max_body_bytes: "lots" is not a size`, true},
		{"bad header count", "queen_gateway {\n\tmax_headers 0\n}", `max_headers: "0" is not a positive integer`, true},
		{"bad failure rate", "queen_gateway {\n\tauth_failures fast 10\n}", `auth_failures: rate "fast"`, true},
		{"failure burst missing", "queen_gateway {\n\tauth_failures 1\n}", "at Testfile:2", true},
		{"shared hosts empty", "queen_gateway {\n\tshared_hosts\n}", "at Testfile:2", true},
		{"shield takes no argument", "queen_gateway {\n\tshield yes\n}", "at Testfile:2", true},
		{"probes takes no argument", "queen_gateway {\n\tprobes yes\n}", "at Testfile:2", true},
		{"console_only takes no argument", "queen_gateway {\n\tconsole_only yes\n}", "at Testfile:2", true},
		{"leader group missing", "queen {\n\tleader_group\n}", "at Testfile:2", false},
		{"leader group twice", "queen {\n\tleader_group a b\n}", "at Testfile:2", false},
		{"bad lease ttl", "queen {\n\tleader_lease_ttl soon\n}", `leader_lease_ttl: "soon" is not a duration`, false},
		{"bad group size", "queen {\n\tleader_group_size 0\n}", `leader_group_size: "0" is not a positive integer`, false},
		{"peer listen missing", "queen {\n\tpeer_listen\n}", "at Testfile:2", false},
		{"peer secret twice", "queen {\n\tpeer_secret a b\n}", "at Testfile:2", false},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			d := caddyfile.NewTestDispenser(tc.input)
			var err error
			if tc.gateway {
				err = new(Gateway).UnmarshalCaddyfile(d)
			} else {
				err = new(App).UnmarshalCaddyfile(d)
			}
			if err == nil || !strings.Contains(err.Error(), tc.want) {
				t.Fatalf("err = %v, want it to contain %q", err, tc.want)
			}
		})
	}
}

// TestDirectiveExpandsToTheOrderedChain adapts a Caddyfile and checks that
// queen_gateway became the gateway handler followed by reverse_proxy with
// the queen upstreams, in that order.
func TestDirectiveExpandsToTheOrderedChain(t *testing.T) {
	input := `{
	queen {
		database_url {env.QUEENGATE_DATABASE_URL}
	}
}
http://*.eu1.example.com {
	queen_gateway {
		upstream_timeout 20s
		dial_timeout 2s
	}
}`
	out, _, err := caddyconfig.GetAdapter("caddyfile").Adapt([]byte(input), nil)
	if err != nil {
		t.Fatal(err)
	}
	var cfg struct {
		Apps struct {
			Queen App `json:"queen"`
		} `json:"apps"`
	}
	if err := json.Unmarshal(out, &cfg); err != nil {
		t.Fatal(err)
	}
	if cfg.Apps.Queen.DatabaseURL != "{env.QUEENGATE_DATABASE_URL}" {
		t.Fatalf("queen app not configured: %s", out)
	}
	chain := findChain(t, out)
	if len(chain) != 2 {
		t.Fatalf("chain has %d handlers, want 2: %s", len(chain), out)
	}
	var first struct {
		Handler         string         `json:"handler"`
		UpstreamTimeout caddy.Duration `json:"upstream_timeout"`
	}
	var second struct {
		Handler          string `json:"handler"`
		DynamicUpstreams struct {
			Source string `json:"source"`
		} `json:"dynamic_upstreams"`
		Transport struct {
			Protocol    string         `json:"protocol"`
			DialTimeout caddy.Duration `json:"dial_timeout"`
		} `json:"transport"`
	}
	_ = json.Unmarshal(chain[0], &first)
	_ = json.Unmarshal(chain[1], &second)
	if first.Handler != "queen_gateway" || first.UpstreamTimeout != caddy.Duration(20*time.Second) {
		t.Errorf("first handler %s", chain[0])
	}
	if second.Handler != "reverse_proxy" || second.DynamicUpstreams.Source != "queen" ||
		second.Transport.Protocol != "http" || second.Transport.DialTimeout != caddy.Duration(2*time.Second) {
		t.Errorf("second handler %s", chain[1])
	}
}

func TestAppValidate(t *testing.T) {
	if err := (&App{PoolMaxConns: 1}).Validate(); err == nil || !strings.Contains(err.Error(), "database_url is required") {
		t.Fatalf("err = %v", err)
	}
	if err := (&App{DatabaseURL: "postgres://x", PoolMaxConns: 1, BaseDomains: []string{"*.eu1.example.com"}}).Validate(); err == nil {
		t.Fatal("a wildcard base domain must be refused")
	}
	if err := (&App{DatabaseURL: "postgres://x", PoolMaxConns: 1, LeaderLeaseTTL: caddy.Duration(100 * time.Millisecond)}).Validate(); err == nil ||
		!strings.Contains(err.Error(), "leader_lease_ttl must be at least 500ms") {
		t.Fatalf("a 100ms lease: err = %v", err)
	}
	secret := strings.Repeat("s", 32)
	for _, tc := range []struct {
		name                    string
		group, listen, url, key string
		want                    string
	}{
		{"complete", "g", "127.0.0.1:7946", "http://127.0.0.1:7946", secret, ""},
		{"behind a name", "g", "0.0.0.0:7946", "https://gw-1.example.com:7946", secret, ""},
		{"without a group", "", "127.0.0.1:7946", "http://127.0.0.1:7946", secret, "need leader_group"},
		{"listen without secret", "g", "127.0.0.1:7946", "http://127.0.0.1:7946", "", "go together"},
		{"secret without listen", "g", "", "", secret, "go together"},
		{"short secret", "g", "127.0.0.1:7946", "http://127.0.0.1:7946", "short", "at least 32 bytes"},
		{"listen not host:port", "g", "127.0.0.1", "http://127.0.0.1", secret, "not host:port"},
		{"every interface", "g", "0.0.0.0:7946", "http://0.0.0.0:7946", secret, "names no host"},
		{"empty host", "g", ":7946", "http://:7946", secret, "names no host"},
		{"not http", "g", "127.0.0.1:7946", "ftp://127.0.0.1:7946", secret, "not an http(s) URL"},
	} {
		a := &App{DatabaseURL: "postgres://x", PoolMaxConns: 1, LeaderGroup: tc.group, PeerListen: tc.listen, PeerAddress: tc.url, PeerSecret: tc.key}
		err := a.Validate()
		if (tc.want == "" && err != nil) || (tc.want != "" && (err == nil || !strings.Contains(err.Error(), tc.want))) {
			t.Errorf("%s: err = %v, want %q", tc.name, err, tc.want)
		}
	}
}

func TestAppValidateGroupMembers(t *testing.T) {
	for _, tc := range []struct {
		name    string
		group   string
		size    int
		members []string
		want    string
	}{
		{"complete", "g", 0, []string{"gw-1", "gw-2"}, ""},
		{"with its size", "g", 2, []string{"gw-1", "gw-2"}, ""},
		{"without a group", "", 0, []string{"gw-1", "gw-2"}, "needs leader_group"},
		{"twice", "g", 0, []string{"gw-1", "gw-2", "gw-2"}, "twice"},
		{"not this gateway", "g", 0, []string{"gw-2", "gw-3"}, "does not name this gateway"},
		{"another size", "g", 3, []string{"gw-1", "gw-2"}, "names 2 gateways"},
	} {
		a := &App{DatabaseURL: "postgres://x", PoolMaxConns: 1, LeaderGroup: tc.group, GatewayName: "gw-1",
			LeaderGroupSize: tc.size, LeaderGroupMembers: tc.members}
		err := a.Validate()
		if (tc.want == "" && err != nil) || (tc.want != "" && (err == nil || !strings.Contains(err.Error(), tc.want))) {
			t.Errorf("%s: err = %v, want %q", tc.name, err, tc.want)
		}
	}
}

// findChain returns the handler list that holds the queen_gateway handler.
func findChain(t *testing.T, config []byte) []json.RawMessage {
	t.Helper()
	var walk func(v any) []json.RawMessage
	walk = func(v any) []json.RawMessage {
		switch v := v.(type) {
		case map[string]any:
			if list, ok := v["handle"].([]any); ok {
				for _, h := range list {
					if m, ok := h.(map[string]any); ok && m["handler"] == "queen_gateway" {
						var out []json.RawMessage
						for _, h := range list {
							b, _ := json.Marshal(h)
							out = append(out, b)
						}
						return out
					}
				}
			}
			for _, child := range v {
				if found := walk(child); found != nil {
					return found
				}
			}
		case []any:
			for _, child := range v {
				if found := walk(child); found != nil {
					return found
				}
			}
		}
		return nil
	}
	var root any
	if err := json.Unmarshal(config, &root); err != nil {
		t.Fatal(err)
	}
	return walk(root)
}
