package caddymodule

import (
	"sync"
	"sync/atomic"

	"github.com/prometheus/client_golang/prometheus"

	"github.com/queengate/queengate/internal/apierror"
	"github.com/queengate/queengate/leader"
	"github.com/queengate/queengate/tenancy"
)

// Request outcomes counted per route class.
const (
	outcomeForwarded     = "forwarded"
	outcomeRefused       = "refused"
	outcomeUpstreamError = "upstream_error"
)

var outcomes = [...]string{outcomeForwarded, outcomeRefused, outcomeUpstreamError}

// gatewayCounters are the process-wide request counters. They live outside
// any configuration so that a reload does not reset them; each
// configuration registers a collector that reads them (Caddy gives every
// configuration its own registry).
type gatewayCounters struct {
	requests [tenancy.ClassOperator + 2][len(outcomes)]atomic.Uint64 // by class (+1 for unclassified) and outcome
	refusals sync.Map                                                // apierror.Code -> *atomic.Uint64
	// byCluster counts forwarded requests per cluster slug, only when
	// metrics_per_cluster is on (the label's cardinality is the number of
	// clusters).
	byCluster sync.Map // slug -> *atomic.Uint64
}

var counters gatewayCounters

func (c *gatewayCounters) request(st *requestState, outcome int) {
	class := int(st.route.Class)
	if !st.classified {
		class = len(c.requests) - 1
	}
	c.requests[class][outcome].Add(1)
}

func (c *gatewayCounters) refused(code apierror.Code) {
	v, ok := c.refusals.Load(code)
	if !ok {
		v, _ = c.refusals.LoadOrStore(code, new(atomic.Uint64))
	}
	v.(*atomic.Uint64).Add(1)
}

func (c *gatewayCounters) forwardedFor(slug string) {
	v, ok := c.byCluster.Load(slug)
	if !ok {
		v, _ = c.byCluster.LoadOrStore(slug, new(atomic.Uint64))
	}
	v.(*atomic.Uint64).Add(1)
}

func className(i int) string {
	if i == len(counters.requests)-1 {
		return "unclassified"
	}
	return tenancy.Class(i).String()
}

var (
	descRequests      = prometheus.NewDesc("queengate_requests_total", "Requests the gateway handled, by route class and outcome.", []string{"class", "outcome"}, nil)
	descRefusals      = prometheus.NewDesc("queengate_refusals_total", "Requests the gateway refused, by error code.", []string{"code"}, nil)
	descClusterReqs   = prometheus.NewDesc("queengate_cluster_requests_total", "Forwarded requests per cluster (metrics_per_cluster only).", []string{"cluster"}, nil)
	descParked        = prometheus.NewDesc("queengate_parked_pops", "Long-poll pops parked now.", nil, nil)
	descParkedCap     = prometheus.NewDesc("queengate_parked_pops_max", "The cell-wide cap on parked pops.", nil, nil)
	descInflight      = prometheus.NewDesc("queengate_produce_exchanges_in_flight", "Produce requests in flight to the cells now (each may outlive its client), counted against produce_max_exchanges.", nil, nil)
	descInflightBytes = prometheus.NewDesc("queengate_produce_exchange_bytes_in_flight", "Body bytes the produce requests in flight hold, counted against produce_max_bytes.", nil, nil)
	descInflightCaps  = prometheus.NewDesc("queengate_produce_exchanges_max", "The bounds on produce requests in flight: exchanges and bytes, for the gateway and for one cluster.", []string{"bound"}, nil)
	descFlushes       = prometheus.NewDesc("queengate_meter_flushes_total", "Usage flushes, by result.", []string{"result"}, nil)
	descFlushSeconds  = prometheus.NewDesc("queengate_meter_last_flush_seconds", "Duration of the last usage flush.", nil, nil)
	descSpoolFiles    = prometheus.NewDesc("queengate_meter_spool_files", "Usage spool files waiting for the database.", nil, nil)
	descSpoolBytes    = prometheus.NewDesc("queengate_meter_spool_bytes", "Bytes in usage spool files.", nil, nil)
	descSpooledRows   = prometheus.NewDesc("queengate_meter_spooled_rows_total", "Usage rows written to the spool.", nil, nil)
	descReplayedRows  = prometheus.NewDesc("queengate_meter_replayed_rows_total", "Spooled usage rows replayed into the database.", nil, nil)
	descQuarantined   = prometheus.NewDesc("queengate_meter_quarantined_files", "Spool files set aside as unreadable.", nil, nil)
	descCircuit       = prometheus.NewDesc("queengate_meter_circuit_open", "1 while the meter has stopped trying the database.", nil, nil)
	descCache         = prometheus.NewDesc("queengate_cache_lookups_total", "Cluster and API key lookups, by kind and result.", []string{"kind", "result"}, nil)
	descPoolConns     = prometheus.NewDesc("queengate_db_pool_connections", "Control-plane database connections, by state.", []string{"state"}, nil)
	descPoolAcquires  = prometheus.NewDesc("queengate_db_pool_acquires_total", "Connections acquired from the pool.", nil, nil)
	descPoolWaits     = prometheus.NewDesc("queengate_db_pool_empty_acquires_total", "Acquires that had to wait for a connection.", nil, nil)
	descStorageActive = prometheus.NewDesc("queengate_storage_quota_active", "1 when the broker reports retained bytes and the storage quota applies.", nil, nil)
	descGatewayRole   = prometheus.NewDesc("queengate_gateway_role", "1 for this gateway's current role in its group (leader or standby).", []string{"group", "gateway", "role"}, nil)
	descLeaseRenewals = prometheus.NewDesc("queengate_leader_lease_attempts_total", "Attempts to take or renew the group's lease, by result (held: this gateway holds it; failed: the database did not answer).", []string{"result"}, nil)
	descTakeovers     = prometheus.NewDesc("queengate_leader_takeovers_total", "Times this gateway became its group's leader.", nil, nil)
	descCellScoping   = prometheus.NewDesc("queengate_cell_tenant_scoping", "1 for each served cell's current isolation verdict (scoped, unscoped or unknown); a cell that is not scoped serves only its keeper (the cluster placed on it first).", []string{"cell", "verdict"}, nil)
	descContradicted  = prometheus.NewDesc("queengate_cell_tenancy_contradicted", "1 while a cell stated scoped by the operator has been found unscoped by a probe: only its keeper is served. Alert on it.", []string{"cell"}, nil)
	descWithheld      = prometheus.NewDesc("queengate_leader_takeovers_withheld_total", "Attempts at an expired lease that did not take it because its holder answered on its peer address that it still leads.", nil, nil)
	descLeaseLapsed   = prometheus.NewDesc("queengate_leader_lease_lapsed", "1 while this gateway's lease has run out by its own clock without a renewal, so that it does not serve.", nil, nil)
	descOnGrants      = prometheus.NewDesc("queengate_leader_serving_on_grants", "1 while this gateway leads only because every other member of its group, cut off from the database too, granted it time on the peer address.", nil, nil)
)

// collector exports the gateway's state for one configuration.
type collector struct {
	app        *App
	perCluster bool
}

func (c *collector) Describe(ch chan<- *prometheus.Desc) {
	for _, d := range []*prometheus.Desc{descRequests, descRefusals, descClusterReqs, descParked, descParkedCap,
		descInflight, descInflightBytes, descInflightCaps,
		descFlushes, descFlushSeconds, descSpoolFiles, descSpoolBytes, descSpooledRows, descReplayedRows,
		descQuarantined, descCircuit, descCache, descPoolConns, descPoolAcquires, descPoolWaits, descStorageActive, descCellScoping, descContradicted,
		descGatewayRole, descLeaseRenewals, descTakeovers, descWithheld, descLeaseLapsed, descOnGrants} {
		ch <- d
	}
}

func (c *collector) Collect(ch chan<- prometheus.Metric) {
	counter := func(d *prometheus.Desc, v uint64, labels ...string) {
		ch <- prometheus.MustNewConstMetric(d, prometheus.CounterValue, float64(v), labels...)
	}
	gauge := func(d *prometheus.Desc, v float64, labels ...string) {
		ch <- prometheus.MustNewConstMetric(d, prometheus.GaugeValue, v, labels...)
	}
	for class := range counters.requests {
		for o, name := range outcomes {
			counter(descRequests, counters.requests[class][o].Load(), className(class), name)
		}
	}
	counters.refusals.Range(func(k, v any) bool {
		counter(descRefusals, v.(*atomic.Uint64).Load(), string(k.(apierror.Code)))
		return true
	})
	if c.perCluster {
		counters.byCluster.Range(func(k, v any) bool {
			counter(descClusterReqs, v.(*atomic.Uint64).Load(), k.(string))
			return true
		})
	}
	exchanges, bytes := inflight.held()
	gauge(descInflight, float64(exchanges))
	gauge(descInflightBytes, float64(bytes))
	caps := c.app.inflightCaps()
	gauge(descInflightCaps, float64(caps.exchanges), "exchanges")
	gauge(descInflightCaps, float64(caps.bytes), "bytes")
	gauge(descInflightCaps, float64(caps.clusterExchanges), "cluster_exchanges")
	gauge(descInflightCaps, float64(caps.clusterBytes), "cluster_bytes")
	if ls := c.app.limits; ls != nil {
		gauge(descParked, float64(ls.parked.Cell()))
		gauge(descParkedCap, float64(ls.parked.CellCap()))
	}
	b := c.app.backend
	if b == nil {
		return
	}
	if b.meter != nil {
		s := b.meter.Stats()
		counter(descFlushes, s.FlushOK, "ok")
		counter(descFlushes, s.FlushFailed, "failed")
		gauge(descFlushSeconds, s.LastFlush.Seconds())
		gauge(descSpoolFiles, float64(s.SpoolFiles))
		gauge(descSpoolBytes, float64(s.SpoolBytes))
		counter(descSpooledRows, s.SpooledRows)
		counter(descReplayedRows, s.ReplayedRows)
		gauge(descQuarantined, float64(s.QuarantinedFiles))
		gauge(descCircuit, boolGauge(s.CircuitOpen))
	}
	if b.cache != nil {
		k := b.cache.Counters()
		counter(descCache, k.ClusterHits, "cluster", "hit")
		counter(descCache, k.ClusterMisses, "cluster", "miss")
		counter(descCache, k.KeyHits, "api_key", "hit")
		counter(descCache, k.KeyMisses, "api_key", "miss")
	}
	if b.pool != nil {
		p := b.pool.Stat()
		gauge(descPoolConns, float64(p.AcquiredConns()), "acquired")
		gauge(descPoolConns, float64(p.IdleConns()), "idle")
		gauge(descPoolConns, float64(p.MaxConns()), "max")
		counter(descPoolAcquires, uint64(p.AcquireCount()))
		counter(descPoolWaits, uint64(p.EmptyAcquireCount()))
	}
	if b.storage != nil {
		active, _ := b.storage.Active()
		gauge(descStorageActive, boolGauge(active))
	}
	if e := b.elector; e != nil {
		for _, role := range []leader.Role{leader.Leader, leader.Standby} {
			gauge(descGatewayRole, boolGauge(e.Role() == role), e.Group(), b.gatewayName, role.String())
		}
		k := e.Counters()
		counter(descLeaseRenewals, k.Renewals, "held")
		counter(descLeaseRenewals, k.Failures, "failed")
		counter(descTakeovers, k.Takeovers)
		counter(descWithheld, k.Withheld)
		gauge(descLeaseLapsed, boolGauge(e.Lapsed()))
		gauge(descOnGrants, boolGauge(e.OnGrants()))
	}
	if b.isolation != nil {
		for _, v := range b.isolation.Verdicts() {
			for _, verdict := range []tenancy.TenantScoping{tenancy.ScopingScoped, tenancy.ScopingUnscoped, tenancy.ScopingUnknown} {
				gauge(descCellScoping, boolGauge(v.Verdict == verdict), v.CellSlug, string(verdict))
			}
			gauge(descContradicted, boolGauge(v.Contradicted), v.CellSlug)
		}
	}
}

func boolGauge(b bool) float64 {
	if b {
		return 1
	}
	return 0
}
