package v1beta1

// Condition types reported on Foo.status.conditions (docs/conditions.md).
const (
	// ConditionReady summarises the others: True when the Deployment is
	// available, runs the current pod template only, and nothing is
	// stalled. A scale that keeps the Deployment available leaves it True.
	ConditionReady = "Ready"
	// ConditionAvailable mirrors the Deployment's own Available condition:
	// it has its minimum number of available pods.
	ConditionAvailable = "Available"
	// ConditionReconciling is True while the Deployment is being created,
	// rolled out or scaled towards what the Foo declares; absent otherwise.
	ConditionReconciling = "Reconciling"
	// ConditionStalled is True while something that will not resolve by
	// itself keeps the Foo from its declared state; absent otherwise.
	ConditionStalled = "Stalled"
)

// Reasons of Ready (True).
const (
	// ReasonDeploymentAvailable: the Deployment is available and runs the
	// current pod template only.
	ReasonDeploymentAvailable = "DeploymentAvailable"
)

// Reasons of Available. Those of the Deployment's Available condition,
// and one for a Foo without a Deployment of its own.
const (
	ReasonMinimumReplicasAvailable   = "MinimumReplicasAvailable"
	ReasonMinimumReplicasUnavailable = "MinimumReplicasUnavailable"
	// ReasonNoDeployment: the Foo has no Deployment of its own (not created
	// yet, refused, the name taken by another, or the old one going away).
	ReasonNoDeployment = "NoDeployment"
)

// Reasons of Reconciling (True), and of Ready (False) while reconciling.
const (
	// ReasonCreating: the Deployment does not exist yet.
	ReasonCreating = "Creating"
	// ReasonWaitingForOldDeployment: a Deployment of that name is being
	// deleted (or left by a deleted Foo of the same name); the controller
	// creates its own once it is gone.
	ReasonWaitingForOldDeployment = "WaitingForOldDeployment"
	// ReasonDeploymentNotObserved: the Deployment controller has not yet
	// observed the Deployment's latest generation.
	ReasonDeploymentNotObserved = "DeploymentNotObserved"
	// ReasonRollingOut: pods of an older pod template remain.
	ReasonRollingOut = "RollingOut"
	// ReasonScaling: the Deployment has more or fewer pods than declared.
	ReasonScaling = "Scaling"
	// ReasonWaitingForReplicas: every pod is there, not all are available.
	ReasonWaitingForReplicas = "WaitingForReplicas"
	// ReasonDeploymentUnavailable (Ready only): the Deployment is not
	// available although nothing is in progress.
	ReasonDeploymentUnavailable = "DeploymentUnavailable"
)

// Reasons of Stalled (True), and of Ready (False) while stalled. Each gets
// one Warning Event when it begins.
const (
	// ReasonDeploymentApplyFailed: the API server refused the Deployment
	// (for example a quota or an admission policy); the message says why.
	// The controller keeps retrying with backoff.
	ReasonDeploymentApplyFailed = "DeploymentApplyFailed"
	// ReasonDeploymentConflict: a Deployment of that name exists and is not
	// controlled by this Foo; the controller leaves it alone.
	ReasonDeploymentConflict = "DeploymentConflict"
	// ReasonReplicasOverridden: the API server keeps the Deployment's
	// replicas at another value than declared (a mutating admission policy
	// or webhook rewrites our correction).
	ReasonReplicasOverridden = "ReplicasOverridden"
	// ReasonProgressDeadlineExceeded: the Deployment reports that its rollout stalled.
	ReasonProgressDeadlineExceeded = "ProgressDeadlineExceeded"
)

// OrphanFinalizer is held on a Foo whose deletionPolicy is Orphan, so the
// controller gets to remove the Deployment's owner reference before the Foo
// (and with it, through garbage collection, the Deployment) is gone.
const OrphanFinalizer = "samplecontroller.example.com/orphan-deployment"
