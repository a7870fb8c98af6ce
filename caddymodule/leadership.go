package caddymodule

import (
	"context"
	"crypto/sha256"
	"encoding/hex"
	"errors"
	"fmt"
	"net"
	"net/http"
	"net/url"
	"os"
	"strconv"
	"time"

	"github.com/caddyserver/caddy/v2"
	"github.com/jackc/pgx/v5/pgxpool"
	"go.uber.org/zap"

	"github.com/queengate/queengate/internal/apierror"
	"github.com/queengate/queengate/leader"
)

// leaderSettings configure the backend's elector; an empty group means a
// gateway of its own, always the leader.
type leaderSettings struct {
	group       string
	name        string
	ttl         time.Duration
	members     int
	memberNames []string
	peerListen  string
	peerURL     string
	peerSecret  string
}

// String keys the shared backend; the secret appears only as a digest.
func (s leaderSettings) String() string {
	digest := sha256.Sum256([]byte(s.peerSecret))
	return fmt.Sprintf("group=%s name=%s ttl=%v members=%d member_names=%q peer_listen=%s peer_url=%s peer_secret=%s",
		s.group, s.name, s.ttl, s.members, s.memberNames, s.peerListen, s.peerURL, hex.EncodeToString(digest[:8]))
}

// validatePeer checks the peer options: all or none of listen and
// secret, only in a group, and an address other members can dial.
func (a *App) validatePeer() error {
	if a.PeerListen == "" && a.PeerSecret == "" && a.PeerAddress == "" {
		return nil
	}
	if a.LeaderGroup == "" {
		return errors.New("queen: peer_listen, peer_address and peer_secret need leader_group")
	}
	if a.PeerListen == "" || a.PeerSecret == "" {
		return errors.New("queen: peer_listen and peer_secret go together (every member of the group answers its peers, proven by the shared secret)")
	}
	if len(a.PeerSecret) < leader.MinPeerSecret {
		return fmt.Errorf("queen: peer_secret must be at least %d bytes, got %d", leader.MinPeerSecret, len(a.PeerSecret))
	}
	if _, _, err := net.SplitHostPort(a.PeerListen); err != nil {
		return fmt.Errorf("queen: peer_listen %q is not host:port: %w", a.PeerListen, err)
	}
	u, err := url.Parse(a.PeerAddress)
	if err != nil || (u.Scheme != "http" && u.Scheme != "https") || u.Host == "" || u.RawQuery != "" || u.Fragment != "" || u.User != nil {
		return fmt.Errorf("queen: peer_address %q is not an http(s) URL of a host", a.PeerAddress)
	}
	if ip := net.ParseIP(u.Hostname()); u.Hostname() == "" || (ip != nil && ip.IsUnspecified()) {
		return fmt.Errorf("queen: peer_address %q names no host the other members can reach; set peer_address when peer_listen listens on every interface", a.PeerAddress)
	}
	return nil
}

// validateMembers checks leader_group_members: only in a group, each name
// once, this gateway's among them, and leader_group_size, when also set,
// their number.
func (a *App) validateMembers() error {
	if len(a.LeaderGroupMembers) == 0 {
		return nil
	}
	if a.LeaderGroup == "" {
		return errors.New("queen: leader_group_members needs leader_group")
	}
	seen := map[string]bool{}
	for _, m := range a.LeaderGroupMembers {
		if m == "" || seen[m] {
			return fmt.Errorf("queen: leader_group_members names %q twice, or an empty name", m)
		}
		seen[m] = true
	}
	if !seen[a.GatewayName] {
		return fmt.Errorf("queen: leader_group_members %q does not name this gateway (gateway_name %q)", a.LeaderGroupMembers, a.GatewayName)
	}
	if a.LeaderGroupSize != 0 && a.LeaderGroupSize != len(a.LeaderGroupMembers) {
		return fmt.Errorf("queen: leader_group_size %d but leader_group_members names %d gateways", a.LeaderGroupSize, len(a.LeaderGroupMembers))
	}
	return nil
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

// leasePoolConns is the size of the lease's own pool: the elector runs one
// statement at a time (attempts, the take after one, the release are
// serialized), and a second connection stands by while a cancelled
// statement's connection is being closed.
const leasePoolConns = 2

// newLeasePool opens the connections the elector alone uses. The lease
// never queues behind request traffic on the shared pool: a flood of
// lookups that fills it must not make the leader's renewal miss its
// deadline (the lease would lapse and the group hand over), nor make a
// standby believe it lost the database. One connection is kept open, so
// that a renewal does not pay for a connect.
func newLeasePool(databaseURL string, ttl time.Duration) (*pgxpool.Pool, error) {
	cfg, err := pgxpool.ParseConfig(databaseURL)
	if err != nil {
		return nil, fmt.Errorf("parse database_url: %w", err)
	}
	cfg.MaxConns, cfg.MinConns = leasePoolConns, 1
	if ttl <= 0 {
		ttl = 2 * time.Second
	}
	// An attempt has TTL/2; a connect that takes longer is of no use to it.
	cfg.ConnConfig.ConnectTimeout = ttl / 2
	cfg.ConnConfig.RuntimeParams["application_name"] = "queengate-lease"
	pool, err := pgxpool.NewWithConfig(context.Background(), cfg)
	if err != nil {
		return nil, fmt.Errorf("create the lease's database pool: %w", err)
	}
	return pool, nil
}

// newElector builds the backend's elector when the gateway is part of a
// group, with its own database connections, and its peer listener when it
// has one.
func (b *backend) newElector(ctx context.Context, databaseURL string, s leaderSettings, log *zap.Logger) error {
	b.gatewayName = s.name
	if s.group == "" {
		return nil
	}
	leasePool, err := newLeasePool(databaseURL, s.ttl)
	if err != nil {
		return err
	}
	b.leasePool = leasePool
	cfg := leader.Config{
		Group: s.group, Name: s.name, TTL: s.ttl, Members: s.members, MemberNames: s.memberNames,
		Store: leader.PgStore{Pool: leasePool},
		Log:   log.Named("leader"),
	}
	if s.peerListen == "" {
		log.Warn("leader group without peer_listen: a standby takes an expired lease without asking the leader; "+
			"only the leader's own bound keeps two members from serving at once", zap.String("group", s.group))
		b.elector = leader.New(cfg)
		return nil
	}
	if len(s.memberNames) == 0 {
		log.Warn("leader group without leader_group_members: no member's grant counts, so a leader that cannot reach the database "+
			"stops at its own lease even when every member is cut off from it", zap.String("group", s.group))
	}
	cfg.PeerURL = s.peerURL
	cfg.Peer = leader.PeerClient{Group: s.group, Name: s.name, Secret: []byte(s.peerSecret)}
	b.elector = leader.New(cfg)
	na, err := caddy.ParseNetworkAddress(s.peerListen)
	if err != nil {
		leasePool.Close()
		return fmt.Errorf("peer_listen %q: %w", s.peerListen, err)
	}
	ln, err := na.Listen(ctx, 0, net.ListenConfig{})
	if err != nil {
		leasePool.Close()
		return fmt.Errorf("peer_listen %q: %w", s.peerListen, err)
	}
	b.peerServer = &http.Server{
		Handler:           leader.PeerHandler(b.elector, []byte(s.peerSecret)),
		ReadHeaderTimeout: time.Second, ReadTimeout: 2 * time.Second, WriteTimeout: 2 * time.Second,
		MaxHeaderBytes: 8 << 10, ErrorLog: zap.NewStdLog(log.Named("peer")),
	}
	go func() { _ = b.peerServer.Serve(ln.(net.Listener)) }()
	log.Info("answering the group's members on the peer address",
		zap.String("peer_listen", s.peerListen), zap.String("peer_address", s.peerURL))
	return nil
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

// closePeer stops answering peers, after the hand-over: until then a
// standby that asks learns that this gateway no longer leads.
func (b *backend) closePeer() {
	if b.peerServer != nil {
		_ = b.peerServer.Close()
	}
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
		detail := "leader of group " + b.elector.Group() + " as " + b.gatewayName
		if b.elector.OnGrants() {
			detail += "; the database does not answer: serving on the grants of the other members, which cannot reach it either"
		}
		return "role", detail, true
	}
	if b.elector.Lapsed() {
		return "role", "not serving: the lease of group " + b.elector.Group() + " ran out without a renewal (the database does not answer) as " +
			b.gatewayName + "; leading again once it renews, unless a standby took over", false
	}
	detail := "standby of group " + b.elector.Group() + " as " + b.gatewayName
	if h := b.elector.Holder(); h != "" {
		detail += "; leader: " + h
	}
	if w := b.elector.Withheld(); w != "" {
		detail += "; " + w
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

// closeLeasePool closes the elector's connections, once it has released
// the lease; a no-op without a group.
func (b *backend) closeLeasePool() {
	if b.leasePool != nil {
		b.leasePool.Close()
	}
}
