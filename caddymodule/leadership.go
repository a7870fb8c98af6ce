package caddymodule

import (
	"context"
	"net/http"
	"os"
	"strconv"
	"time"

	"go.uber.org/zap"

	"github.com/queengate/queengate/internal/apierror"
	"github.com/queengate/queengate/leader"
)

// leaderSettings configure the backend's elector; an empty group means a
// gateway of its own, always the leader.
type leaderSettings struct {
	group string
	name  string
	ttl   time.Duration
}

// defaultGatewayName names a gateway that was given no name: unique per
// process, so that two gateways on one machine never share a lease.
func defaultGatewayName() string {
	host, err := os.Hostname()
	if err != nil || host == "" {
		host = "gateway"
	}
	return host + "-" + strconv.Itoa(os.Getpid())
}

// newElector builds the backend's elector when the gateway is part of a
// group.
func (b *backend) newElector(s leaderSettings, log *zap.Logger) {
	b.gatewayName = s.name
	if s.group == "" {
		return
	}
	b.elector = leader.New(leader.Config{
		Group: s.group, Name: s.name, TTL: s.ttl,
		Store: leader.PgStore{Pool: b.pool},
		Log:   log.Named("leader"),
	})
}

// handOver gives up the group's lease for good, so that the standby
// takes it at its next attempt; a no-op without a group or when done.
func (b *backend) handOver() {
	if b.elector == nil {
		return
	}
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Second)
	defer cancel()
	b.elector.Stop(ctx)
}

// standby reports whether this gateway is the standby of its group, which
// serves nothing but health probes.
func (b *backend) standby() bool {
	return b.elector != nil && b.elector.Role() != leader.Leader
}

// errStandby answers a request that reached a standby: the load balancer
// should send it to the leader, which a retry a second later will reach.
var errStandby = &apierror.Error{Status: http.StatusServiceUnavailable, Code: apierror.GatewayStandby,
	Message: "this gateway is the standby of its group; the leader serves the cell", RetryAfter: 1}

// leaderReadiness reports the gateway's role; a standby is not ready, so
// that load balancers send traffic to the leader only.
func (b *backend) leaderReadiness(context.Context) (string, string, bool) {
	if b.elector == nil {
		return "role", "leader (no group)", true
	}
	if b.elector.Role() == leader.Leader {
		return "role", "leader of group " + b.elector.Group() + " as " + b.gatewayName, true
	}
	detail := "standby of group " + b.elector.Group() + " as " + b.gatewayName
	if h := b.elector.Holder(); h != "" {
		detail += "; leader: " + h
	}
	return "role", detail, false
}

// servingGateway is the gateway that serves this gateway's cell now, as
// far as it knows: itself, or its group's leader.
func (b *backend) servingGateway() (name, group, role string) {
	if b.elector == nil {
		return b.gatewayName, "", leader.Leader.String()
	}
	role = b.elector.Role().String()
	name = b.gatewayName
	if role != leader.Leader.String() {
		name = b.elector.Holder()
	}
	return name, b.elector.Group(), role
}
