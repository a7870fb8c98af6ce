package tenancy

// Role is a user's role on one cluster, from cluster_roles.
type Role uint8

// The roles, from most to least capable. RoleNone is no role at all.
const (
	RoleNone Role = iota
	RoleAdmin
	RoleProducer
	RoleConsumer
	RoleViewer
)

// ParseRole reads a role as the schema spells it; anything else is RoleNone.
func ParseRole(s string) Role {
	switch s {
	case "admin":
		return RoleAdmin
	case "producer":
		return RoleProducer
	case "consumer":
		return RoleConsumer
	case "viewer":
		return RoleViewer
	}
	return RoleNone
}

func (r Role) String() string {
	switch r {
	case RoleAdmin:
		return "admin"
	case RoleProducer:
		return "producer"
	case RoleConsumer:
		return "consumer"
	case RoleViewer:
		return "viewer"
	}
	return "none"
}
