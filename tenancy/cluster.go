package tenancy

import (
	"encoding/json"
	"time"

	"github.com/queengate/queengate/limits"
)

// Cluster is everything the request path needs to know about one cluster,
// read in one query from the cluster, its tenant, its cell and its plan.
type Cluster struct {
	ID           string // clusters.id
	TenantID     string // tenants.id
	Slug         string // clusters.slug, the first label of its hostname
	BrokerTenant string // clusters.broker_tenant_uuid, sent upstream as x-queen-tenant
	Status       Status // worst of tenant and cluster status
	PlanCode     string

	CellID     string
	CellSlug   string
	CellURL    string // cells.base_url
	CellSecret string // cells.cell_secret, presented upstream as a bearer token; may be empty
	// CellTenancy is the operator's statement of the cell's tenancy
	// (cells.tenancy_stated): "probe" (the probe decides), "scoped" or
	// "unscoped" (see docs/isolation.md).
	CellTenancy string
	// CellGroup is the gateway group recorded as fronting the cell
	// (gateway_group_cells), "" when none is; see Fronting.
	CellGroup string
	// Draining: the cluster is leaving its cell (queen_proxy.cluster_drains,
	// deleted or released as the cell's keeper), so nothing of it may
	// reach the cell any more (docs/isolation.md).
	Draining bool

	Limits   limits.Effective
	Features Features
}

// Features are the plan's feature flags. A flag is on only when the plan's
// features object holds JSON true for it.
type Features struct {
	Streams   bool
	Traces    bool
	KV        bool
	Timers    bool
	Ephemeral bool
}

// ParseFeatures reads a plan's features JSON object. Anything that is not
// JSON true, and any unparsable document, leaves a flag off.
func ParseFeatures(raw []byte) Features {
	var m map[string]json.RawMessage
	if err := json.Unmarshal(raw, &m); err != nil {
		return Features{}
	}
	on := func(k string) bool { return string(m[k]) == "true" }
	return Features{
		Streams:   on("streams"),
		Traces:    on("traces"),
		KV:        on("kv"),
		Timers:    on("timers"),
		Ephemeral: on("ephemeral"),
	}
}

// Scope is one permission an API key carries.
type Scope uint8

// The API key scopes the schema allows.
const (
	ScopeProduce Scope = 1 << iota
	ScopeConsume
	ScopeAdmin
	ScopeRead
)

// ScopeSet is a set of scopes, kept as bits so checking one costs nothing.
type ScopeSet uint8

// ParseScopes reads the scopes column. A name the schema does not allow
// grants nothing.
func ParseScopes(names []string) ScopeSet {
	var s ScopeSet
	for _, n := range names {
		switch n {
		case "produce":
			s |= ScopeSet(ScopeProduce)
		case "consume":
			s |= ScopeSet(ScopeConsume)
		case "admin":
			s |= ScopeSet(ScopeAdmin)
		case "read":
			s |= ScopeSet(ScopeRead)
		}
	}
	return s
}

// AllScopes grants everything a key can hold.
const AllScopes = ScopeSet(ScopeProduce | ScopeConsume | ScopeAdmin | ScopeRead)

// Has reports whether the set holds sc.
func (s ScopeSet) Has(sc Scope) bool { return s&ScopeSet(sc) != 0 }

// HasAny reports whether the set holds at least one of scs.
func (s ScopeSet) HasAny(scs ...Scope) bool {
	for _, sc := range scs {
		if s.Has(sc) {
			return true
		}
	}
	return false
}

// APIKey is a live (not revoked) API key together with the cluster it is
// bound to.
type APIKey struct {
	ID     string
	Scopes ScopeSet
	// ExpiresAt is when the key stops working; zero means never. A cached
	// key is checked against it on every use.
	ExpiresAt time.Time
	Cluster   *Cluster
}

// Has reports whether the key carries scope s.
func (k *APIKey) Has(s Scope) bool { return k.Scopes.Has(s) }

// Expired reports whether the key's expiry has passed at now.
func (k *APIKey) Expired(now time.Time) bool {
	return !k.ExpiresAt.IsZero() && !now.Before(k.ExpiresAt)
}
