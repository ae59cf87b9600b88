package agentapi

// AnnotationMembers, on the primary Lease, lists the instances (pod
// names, comma-separated) that may hold it, as the operator writes it:
// the Database's pods and the holder. An agent takes a Lease that names
// another holder, or none, only when it is a member; a primary that
// cannot renew the Lease because the API server does not answer keeps
// serving past its renew deadline only while every other member confirms
// it (the failsafe, internal/agent/failsafe.go). A Lease without it has
// neither the rule nor the failsafe.
const AnnotationMembers = "database.dbkeeper.io/members"
