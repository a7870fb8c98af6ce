package tenancy

import "testing"

// TestAuthorizationMatrix is datamodel-auth.md §3.8, row by row.
func TestAuthorizationMatrix(t *testing.T) {
	routes := map[string]Route{
		"produce":    {Class: ClassProduce},
		"consume":    {Class: ClassConsume},
		"queueadmin": {Class: ClassQueueAdmin},
		"read":       {Class: ClassRead},
		"gated-read": {Class: ClassGated, Feature: FeatureKV, Op: GatedRead},
		"gated-grow": {Class: ClassGated, Feature: FeatureKV, Op: GatedGrow},
		"gated-open": {Class: ClassGated, Feature: FeatureStreams, Op: GatedOpen},
		"gated-mix":  {Class: ClassGated, Feature: FeatureTimers, Op: GatedMixed},
		"operator":   {Class: ClassOperator},
		"blocked":    {Class: ClassBlocked},
	}
	key := func(s ...Scope) *Principal {
		var set ScopeSet
		for _, sc := range s {
			set |= ScopeSet(sc)
		}
		return &Principal{Kind: PrincipalAPIKey, KeyID: "k", Scopes: set}
	}
	user := func(r Role, op bool) *Principal {
		return &Principal{Kind: PrincipalUser, UserID: "u", Role: r, Operator: op}
	}
	gatedWrite := []string{"gated-grow", "gated-open", "gated-mix"}
	cases := []struct {
		name    string
		p       *Principal
		allowed []string
	}{
		{"produce key", key(ScopeProduce), append([]string{"produce", "gated-read"}, gatedWrite...)},
		{"consume key", key(ScopeConsume), append([]string{"consume", "gated-read"}, gatedWrite...)},
		{"admin key", key(ScopeAdmin), []string{"queueadmin", "read", "gated-read"}},
		{"read key", key(ScopeRead), []string{"read", "gated-read"}},
		{"all-scope key", key(ScopeProduce, ScopeConsume, ScopeAdmin, ScopeRead),
			append([]string{"produce", "consume", "queueadmin", "read", "gated-read"}, gatedWrite...)},
		{"no-scope key", key(), nil},
		{"admin", user(RoleAdmin, false), append([]string{"produce", "consume", "queueadmin", "read", "gated-read"}, gatedWrite...)},
		{"producer", user(RoleProducer, false), append([]string{"produce", "read", "gated-read"}, gatedWrite...)},
		{"consumer", user(RoleConsumer, false), append([]string{"consume", "read", "gated-read"}, gatedWrite...)},
		{"viewer", user(RoleViewer, false), []string{"read", "gated-read"}},
		{"no role", user(RoleNone, false), nil},
		{"operator", user(RoleAdmin, true), append([]string{"produce", "consume", "queueadmin", "read", "gated-read", "operator"}, gatedWrite...)},
		{"zero principal", &Principal{}, nil},
	}
	for _, c := range cases {
		allowed := map[string]bool{}
		for _, a := range c.allowed {
			allowed[a] = true
		}
		for name, r := range routes {
			if got := Authorize(c.p, r); got != allowed[name] {
				t.Errorf("%s on %s: allowed %v, want %v", c.name, name, got, allowed[name])
			}
		}
	}
}

func TestBrokerRoleAndSubject(t *testing.T) {
	for r, want := range map[Route]string{
		{Class: ClassRead}: BrokerRoleReadOnly,
		{Class: ClassGated, Feature: FeatureKV, Op: GatedRead}: BrokerRoleReadOnly,
		{Class: ClassGated, Feature: FeatureKV, Op: GatedGrow}: BrokerRoleReadWrite,
		{Class: ClassProduce}:    BrokerRoleReadWrite,
		{Class: ClassConsume}:    BrokerRoleReadWrite,
		{Class: ClassQueueAdmin}: BrokerRoleAdmin,
		{Class: ClassOperator}:   BrokerRoleAdmin,
	} {
		if got := BrokerRole(r); got != want {
			t.Errorf("BrokerRole(%v) = %s, want %s", r, got, want)
		}
	}
	if (&Principal{Kind: PrincipalAPIKey, KeyID: "k", UserID: "u"}).Subject() != "k" ||
		(&Principal{Kind: PrincipalUser, KeyID: "k", UserID: "u"}).Subject() != "u" {
		t.Fatal("Subject")
	}
	for _, s := range []string{"admin", "producer", "consumer", "viewer"} {
		if ParseRole(s).String() != s {
			t.Errorf("role %s does not round-trip", s)
		}
	}
	if ParseRole("Admin") != RoleNone || ParseScopes([]string{"read", "bogus"}) != ScopeSet(ScopeRead) {
		t.Fatal("unknown names must grant nothing")
	}
}
