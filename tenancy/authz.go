package tenancy

// PrincipalKind tells an API key from a human session.
type PrincipalKind uint8

// The kinds of principal.
const (
	PrincipalAPIKey PrincipalKind = iota + 1
	PrincipalUser
	// PrincipalToken is a token of a customer's identity provider,
	// admitted like an API key: by its scopes, under its issuer's id.
	PrincipalToken
)

// Principal is who is calling, once authenticated against one cluster.
type Principal struct {
	Kind PrincipalKind

	// For API keys, and for identity provider tokens (KeyID is then
	// the issuer's "jwt:<name>").
	KeyID  string
	Scopes ScopeSet

	// For human sessions: the user, the role on this cluster (RoleAdmin
	// for a live operator), and whether the user is a live operator.
	UserID   string
	Role     Role
	Operator bool
}

// Subject is the id the cell is told about: the API key id (the issuer's
// id for a provider's token) or the user id.
func (p *Principal) Subject() string {
	if p.Kind == PrincipalAPIKey || p.Kind == PrincipalToken {
		return p.KeyID
	}
	return p.UserID
}

// Authorize applies the authorization matrix: whether p may call a route of
// class r. Operator routes are for live operators only and Blocked routes
// for nobody.
func Authorize(p *Principal, r Route) bool {
	switch p.Kind {
	case PrincipalAPIKey, PrincipalToken:
		return keyMayCall(p.Scopes, r)
	case PrincipalUser:
		return userMayCall(p, r)
	}
	return false
}

func keyMayCall(s ScopeSet, r Route) bool {
	switch r.Class {
	case ClassProduce:
		return s.Has(ScopeProduce)
	case ClassConsume:
		return s.Has(ScopeConsume)
	case ClassQueueAdmin:
		return s.Has(ScopeAdmin)
	case ClassRead:
		return s.HasAny(ScopeRead, ScopeAdmin)
	case ClassGated:
		if r.Op == GatedRead {
			return s.HasAny(ScopeRead, ScopeAdmin, ScopeProduce, ScopeConsume)
		}
		return s.HasAny(ScopeProduce, ScopeConsume)
	}
	// Keys are never operators, and Blocked is blocked for everyone.
	return false
}

func userMayCall(p *Principal, r Route) bool {
	role := p.Role
	switch r.Class {
	case ClassProduce:
		return role == RoleAdmin || role == RoleProducer
	case ClassConsume:
		return role == RoleAdmin || role == RoleConsumer
	case ClassQueueAdmin:
		return role == RoleAdmin
	case ClassRead:
		return role != RoleNone
	case ClassGated:
		if r.Op == GatedRead {
			return role != RoleNone
		}
		return role == RoleAdmin || role == RoleProducer || role == RoleConsumer
	case ClassOperator:
		return p.Operator
	}
	return false
}

// BrokerRole is the role claim a cell that checks its own JWTs needs for a
// route of class r; the gateway has already authorized the request, so
// this only keeps the cell's own guard consistent with ours.
func BrokerRole(r Route) string {
	switch r.Class {
	case ClassRead:
		return BrokerRoleReadOnly
	case ClassGated:
		if r.Op == GatedRead {
			return BrokerRoleReadOnly
		}
		return BrokerRoleReadWrite
	case ClassProduce, ClassConsume:
		return BrokerRoleReadWrite
	}
	return BrokerRoleAdmin
}
