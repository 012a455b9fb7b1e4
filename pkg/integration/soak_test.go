//go:build integration

package integration

// The chaos soak: for a while, random operations on Foos and their
// Deployments, as users and other clients make them, mixed with controller
// crashes and API server restarts; then the controller must bring the
// namespace to the invariants, and the deletion policies must have left
// exactly what they promise. `make test` runs the short form (40s);
// `make soak` runs it for as long as asked.
//
// TestChaosSoakSharded is the same over sharded replicas (-shard-slots)
// whose membership churns: members killed, stopped and added among the
// other operations; on top of the invariants, the audit log must show
// every namespace written to only by its slot's holder at the time.

import (
	"context"
	"errors"
	"fmt"
	"math/rand/v2"
	"os"
	"path/filepath"
	"regexp"
	"slices"
	"sort"
	"strconv"
	"strings"
	"testing"
	"time"

	appsv1 "k8s.io/api/apps/v1"
	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/utils/ptr"

	samplev1beta1 "example.com/foo-controller/pkg/apis/samplecontroller/v1beta1"
	"example.com/foo-controller/pkg/plan"
	"example.com/foo-controller/pkg/shard"
)

// The kinds of chaos operation, in the order the summary lists them.
const (
	opCreate            = "create"
	opImage             = "image"
	opScale             = "scale"
	opRename            = "rename"
	opDelete            = "delete"
	opEditDeployment    = "edit-deployment"
	opDeleteDeployment  = "delete-deployment"
	opFlipPolicy        = "flip-policy"
	opRestartController = "restart-controller"
	opKillMember        = "kill-member"
	opStopMember        = "stop-member"
	opAddMember         = "add-member"
	opRestartAPIServer  = "restart-apiserver"
	// Not operations: what the test did when a controller exited by
	// itself (see checkControllers).
	opRestartCrashed = "restart-crashed"
	opReplaceLost    = "replace-lost"
)

var soakOps = []string{opCreate, opImage, opScale, opRename, opDelete, opEditDeployment, opDeleteDeployment,
	opFlipPolicy, opRestartController, opKillMember, opStopMember, opAddMember, opRestartAPIServer,
	opRestartCrashed, opReplaceLost}

// soakImages are valid, pinned images for the Foos (kwok runs no image).
var soakImages = []string{"nginx:1.25", "nginx:1.26", "nginx:1.27", "nginx:1.28"}

const (
	soakInitialFoos = 10
	// soakAPIServerGap is the least time between two API server restarts,
	// so that the run makes progress in between.
	soakAPIServerGap = 15 * time.Second

	// The sharded soak's group: it starts with soakFirstMembers members,
	// and the member operations keep it between 1 and soakMaxMembers.
	soakFirstMembers = 2
	soakMaxMembers   = 3
	// soakSpacesPerSlot namespaces in each slot hold the sharded soak's Foos.
	soakSpacesPerSlot = 2
	// soakLossWindow: a member may lose its Lease and exit up to this long
	// after the API server is back from a restart (see excusedExit): its
	// renewals failed for the renew deadline (4s, shardedArgs) during the
	// outage, or timed out on an API server still warming up, and it sees
	// the loss at its next tick.
	soakLossWindow = 10 * time.Second
)

// TestChaosSoak runs random operations for FOO_SOAK_DURATION (default
// 40s), one every 150–400ms: create, update, scale, rename and delete Foos,
// flip their deletion policy, edit and delete their Deployments as another
// client, crash or stop the controller (then start it again), and restart
// the API server. Operations are attempts: one that races with another
// (NotFound, Conflict) or meets the API server down is logged and the run
// goes on. Afterwards the invariants must hold within 3 minutes, every
// Deployment without a controller must be one that an Orphan deletion kept,
// and no Deployment of a Foo deleted with the Delete policy may remain.
//
// Every choice comes from a PCG generator seeded with FOO_SOAK_SEED (logged;
// random if unset), and only from the generator and the test's own model of
// what it did, never from what the cluster answered: the same seed gives the
// same sequence of operations (a prefix of it, if the run is shorter). The
// timing of a real control plane is not replayable, so a seed reproduces the
// scenario, not necessarily its interleaving with the controller.
func TestChaosSoak(t *testing.T) {
	t.Parallel()
	runSoak(t, soakDuration(t, 40*time.Second), 0)
}

// TestChaosSoakSharded is TestChaosSoak over a shard group: the controller
// is 1 to 3 processes with -shard-slots=FOO_SOAK_SLOTS (default 4) and the
// short Lease timings of shardedArgs (6s, 4s, 1s), over two namespaces in
// each slot (spacesInSlots: the same names, so the same slots, in every
// run). The controller restarts give way to membership churn: SIGKILL a
// member or SIGTERM one (while two or more run), add one (up to three).
// A member that exits by itself fails the test, unless it lost its Lease
// to an API server restart (excusedExit); either way it is started again
// in its place, as its Pod would be. Afterwards, as well as the
// invariants and the deletion policies in every namespace, the audit log
// must show that every write to a namespace reached the API server while
// its writer held the namespace's slot Lease (checkSlotWrites): never two
// members writing to one namespace in overlapping windows.
// FOO_SOAK_DURATION defaults to 30s here; FOO_SOAK_SEED replays the
// operations as in TestChaosSoak, the namespace of each Foo included.
func TestChaosSoakSharded(t *testing.T) {
	t.Parallel()
	slots := 4
	if v := os.Getenv("FOO_SOAK_SLOTS"); v != "" {
		n, err := strconv.Atoi(v)
		if err != nil || n < 1 || n > 64 {
			t.Fatalf("FOO_SOAK_SLOTS=%q: want a slot count from 1 to 64 (%v)", v, err)
		}
		slots = n
	}
	runSoak(t, soakDuration(t, 30*time.Second), shard.Slots(slots))
}

// soakDuration is FOO_SOAK_DURATION, or def if it is unset.
func soakDuration(t *testing.T, def time.Duration) time.Duration {
	t.Helper()
	v := os.Getenv("FOO_SOAK_DURATION")
	if v == "" {
		return def
	}
	d, err := time.ParseDuration(v)
	if err != nil || d <= 0 {
		t.Fatalf("FOO_SOAK_DURATION=%q: want a positive Go duration (%v)", v, err)
	}
	return d
}

// runSoak runs the chaos for duration, then checks the end state. With
// slots 0, one controller watches one namespace; otherwise a shard group of
// that many slots shares several namespaces.
func runSoak(t *testing.T, duration time.Duration, slots shard.Slots) {
	seed := seedFromEnv(t, "FOO_SOAK_SEED")
	// Its own control plane: the soak restarts the API server. With
	// shutdown-send-retry-after (as in production behind a load balancer),
	// a stopped API server answers 429 Retry-After while it drains and exits
	// in about 2s; without it, it stops listening at once but takes 20s to
	// exit, and each restart would stall the chaos for half a minute.
	flags := map[string]string{"shutdown-send-retry-after": "true"}
	if slots != 0 {
		// The audit log is read whole at the end (checkSlotWrites): no
		// rotation at its default 100 MB in a long soak.
		flags["audit-log-maxsize"] = "100000"
	}
	cl := privateCluster(t, clusterOptions{apiserverFlags: flags})
	// envtest gives a restarted API server 20s to become healthy: short on
	// a busy machine, and a failed start would end the run.
	cl.env.ControlPlane.APIServer.StartTimeout = 2 * time.Minute
	c := &soak{
		t: t, cl: cl, seed: seed, slots: slots,
		rng:         rand.New(rand.NewPCG(seed, seed)),
		counts:      map[string]*soakCount{},
		owner:       map[string]string{},
		deletedWith: map[string]samplev1beta1.DeletionPolicy{},
		mustKeep:    map[string]string{},
	}
	if slots == 0 {
		c.spaces = []*scenario{newScenarioOn(t, cl)}
	} else {
		c.spaces = spacesInSlots(t, cl, slots, soakSpacesPerSlot)
		bySlot := map[int][]string{}
		for _, sp := range c.spaces {
			bySlot[slots.Of(sp.ns)] = append(bySlot[slots.Of(sp.ns)], sp.ns)
		}
		t.Logf("%d slots; namespaces by slot: %v", int(slots), bySlot)
	}
	c.s = c.spaces[0]
	s := c.s
	t.Cleanup(c.report)

	c.start = time.Now()
	if slots == 0 {
		c.ctrl = s.startController("-v=2")
	} else {
		for range soakFirstMembers {
			c.members = append(c.members, c.startMember())
		}
	}
	for range soakInitialFoos {
		c.do(opCreate)
	}
	t.Logf("chaos for %v", duration)
	for time.Since(c.start) < duration {
		pause := time.Duration(150+c.rng.IntN(251)) * time.Millisecond
		c.virtual += pause
		select {
		case <-s.ctx.Done():
			t.Fatal("test context ended during the chaos")
		case <-time.After(pause):
		}
		c.checkControllers()
		c.do(c.pick())
	}
	chaosEnd := time.Now()
	c.checkControllers()
	t.Logf("chaos over after %d operations in %v; %d Foos in the model", c.ops,
		chaosEnd.Sub(c.start).Round(time.Millisecond), len(c.foos))

	s.eventually(3*time.Minute, "the invariants", c.progress("the invariants", c.invariants))
	t.Logf("invariants hold %v after the end of the chaos", time.Since(chaosEnd).Round(time.Millisecond))
	s.eventually(2*time.Minute, "the deletion policies' leftovers", c.progress("the deletion policies' leftovers", c.leftovers))
	t.Logf("deletion policies respected %v after the end of the chaos", time.Since(chaosEnd).Round(time.Millisecond))

	nFoos, nDeps := 0, 0
	for _, sp := range c.spaces {
		if foos, deps, err := sp.listAll(); err == nil {
			nFoos += len(foos.Items)
			nDeps += len(deps.Items)
		}
	}
	t.Logf("end state: %d Foos, %d Deployments (%d kept by Orphan deletions that were checked) in %d namespaces",
		nFoos, nDeps, len(c.mustKeep), len(c.spaces))
	if slots == 0 {
		return
	}
	leases, checked, replicas := checkSlotWrites(t, cl, s.ns, slots)
	t.Logf("%d writes checked against %d slot Lease writes by %d members: each from its slot's holder", checked, len(leases), replicas)
	if checked == 0 {
		t.Errorf("no write checked: the audit log shows none of the members' writes")
	}
	if t.Failed() {
		t.Logf("slot Lease writes (seconds, slot, holder named): %s", leaseHistory(leases))
	}
}

// soak is the state of one chaos run. foos is the test's model of the Foos
// it may operate on: it changes only by the operations' own decisions
// (a delete removes the Foo from it even if the request failed), so that
// the choices do not depend on the cluster's answers (see TestChaosSoak).
type soak struct {
	t      *testing.T
	cl     *cluster
	spaces []*scenario // the namespaces of the Foos
	s      *scenario   // spaces[0]: starts the controllers, holds the Leases
	seed   uint64
	rng    *rand.Rand
	start  time.Time
	ctrl   *process // the one controller (slots 0)

	// slots is the shard group's slot count, 0 for one controller. members
	// is the group as the test's model sees it: it changes only by the
	// member operations, and a member that exited by itself is started
	// again in its place (checkControllers).
	slots   shard.Slots
	members []*process
	// outages are the API server restarts: from the stop to healthy again.
	outages [][2]time.Time

	foos    []*soakFoo
	nextFoo int // for unique Foo names
	nextDep int // for unique Deployment names on rename
	// virtual is the sum of the drawn pauses: a clock that the seed
	// determines and real time never runs behind. The API server restarts
	// are spaced by it.
	virtual              time.Duration
	lastAPIServerRestart time.Duration

	ops    int
	counts map[string]*soakCount
	oplog  []string

	// owner maps each Deployment name the test ever declared to its Foo.
	// Names are never reused (Foo names count up, renames are unique), so
	// no two Foos ever want the same Deployment.
	owner map[string]string
	// deletedWith is each deleted Foo's deletionPolicy, as read just before
	// the delete request.
	deletedWith map[string]samplev1beta1.DeletionPolicy
	// mustKeep maps a Deployment to its Foo, deleted with the Orphan policy
	// while it held the finalizer and controlled that Deployment: the
	// Deployment must survive, without an owner.
	mustKeep map[string]string
}

type soakFoo struct {
	sp               *scenario // its namespace
	name, deployment string
	policy           samplev1beta1.DeletionPolicy
}

type soakCount struct{ n, failed int }

type soakWeight struct {
	op string
	w  int
}

// pick draws the next operation, weighted; creations keep the population
// from dying out or growing without bound.
func (c *soak) pick() string {
	create := 8
	switch n := len(c.foos); {
	case n == 0:
		return opCreate
	case n < 8:
		create = 16
	case n > 25:
		create = 3
	}
	weights := []soakWeight{
		{opCreate, create}, {opImage, 12}, {opScale, 12}, {opRename, 10}, {opDelete, 8},
		{opEditDeployment, 12}, {opDeleteDeployment, 7}, {opFlipPolicy, 8},
	}
	switch n := len(c.members); {
	case c.slots == 0:
		weights = append(weights, soakWeight{opRestartController, 5})
	case n == 1:
		weights = append(weights, soakWeight{opAddMember, 12})
	case n < soakMaxMembers:
		weights = append(weights, soakWeight{opKillMember, 3}, soakWeight{opStopMember, 3}, soakWeight{opAddMember, 5})
	default:
		weights = append(weights, soakWeight{opKillMember, 3}, soakWeight{opStopMember, 3})
	}
	if c.virtual-c.lastAPIServerRestart >= soakAPIServerGap {
		weights = append(weights, soakWeight{opRestartAPIServer, 3})
	}
	total := 0
	for _, w := range weights {
		total += w.w
	}
	r := c.rng.IntN(total)
	for _, w := range weights {
		if r < w.w {
			return w.op
		}
		r -= w.w
	}
	panic("unreachable")
}

// do runs one operation of the given kind and records it. Each operation
// draws everything it needs from the generator before its first request.
func (c *soak) do(op string) {
	c.ops++
	ctx, cancel := context.WithTimeout(c.s.ctx, 30*time.Second)
	defer cancel()
	var detail string
	var err error
	switch op {
	case opCreate:
		detail, err = c.create(ctx)
	case opImage:
		detail, err = c.setImage(ctx)
	case opScale:
		detail, err = c.scale(ctx)
	case opRename:
		detail, err = c.rename(ctx)
	case opDelete:
		detail, err = c.deleteFoo(ctx)
	case opEditDeployment:
		detail, err = c.editDeployment(ctx)
	case opDeleteDeployment:
		detail, err = c.deleteDeployment(ctx)
	case opFlipPolicy:
		detail, err = c.flipPolicy(ctx)
	case opRestartController:
		detail = c.restartController()
	case opKillMember:
		detail = c.killMember()
	case opStopMember:
		detail = c.stopMember()
	case opAddMember:
		detail = c.addMember()
	case opRestartAPIServer:
		detail = c.restartAPIServer()
	default:
		c.t.Fatalf("unknown operation %q", op)
	}
	c.record(op, detail, err)
}

func (c *soak) record(op, detail string, err error) {
	st := c.counts[op]
	if st == nil {
		st = &soakCount{}
		c.counts[op] = st
	}
	st.n++
	result := "ok"
	if err != nil {
		st.failed++
		result = shorten(err.Error(), 160)
		// Racing operations fail in these ways; a refused request means
		// the test sent something invalid.
		if apierrors.IsInvalid(err) || apierrors.IsBadRequest(err) {
			c.t.Errorf("operation #%d %s %s: refused as invalid (a bug in the test): %v", c.ops, op, detail, err)
		}
	}
	now := time.Now()
	c.oplog = append(c.oplog, fmt.Sprintf("%8.3fs %s #%-4d %-18s %s: %s",
		now.Sub(c.start).Seconds(), now.Format("15:04:05.000"), c.ops, op, detail, result))
}

func shorten(s string, n int) string {
	if len(s) <= n {
		return s
	}
	return s[:n] + "…"
}

// target draws one Foo of the model.
func (c *soak) target() *soakFoo { return c.foos[c.rng.IntN(len(c.foos))] }

func (c *soak) patchFoo(ctx context.Context, f *soakFoo, patch string, subresources ...string) error {
	_, err := f.sp.foos.SamplecontrollerV1beta1().Foos(f.sp.ns).Patch(ctx, f.name, types.MergePatchType, []byte(patch),
		metav1.PatchOptions{FieldManager: "chaos-user"}, subresources...)
	return err
}

// create creates a Foo; with several namespaces, in one drawn first.
func (c *soak) create(ctx context.Context) (string, error) {
	sp := c.spaces[0]
	if len(c.spaces) > 1 {
		sp = c.spaces[c.rng.IntN(len(c.spaces))]
	}
	c.nextFoo++
	name := fmt.Sprintf("foo-%d", c.nextFoo)
	replicas := int32(c.rng.IntN(4))
	image := soakImages[c.rng.IntN(len(soakImages))]
	policy := samplev1beta1.DeletionPolicyDelete
	if c.rng.IntN(10) < 3 {
		policy = samplev1beta1.DeletionPolicyOrphan
	}
	c.foos = append(c.foos, &soakFoo{sp: sp, name: name, deployment: name, policy: policy})
	c.owner[name] = name

	foo := newFoo(name, name, replicas)
	foo.Spec.Deployment.Image = image
	foo.Spec.DeletionPolicy = policy
	port := "none"
	if c.rng.IntN(2) == 0 {
		foo.Spec.Deployment.ContainerPort = ptr.To[int32](8080)
		port = "8080"
	}
	_, err := sp.foos.SamplecontrollerV1beta1().Foos(sp.ns).Create(ctx, foo, metav1.CreateOptions{FieldManager: "chaos-user"})
	if len(c.spaces) > 1 {
		name = sp.ns + "/" + name
	}
	return fmt.Sprintf("%s replicas=%d image=%s policy=%s containerPort=%s", name, replicas, image, policy, port), err
}

func (c *soak) setImage(ctx context.Context) (string, error) {
	f := c.target()
	image := soakImages[c.rng.IntN(len(soakImages))]
	return fmt.Sprintf("%s image=%s", f.name, image), c.patchFoo(ctx, f, fmt.Sprintf(`{"spec":{"deployment":{"image":%q}}}`, image))
}

// scale sets spec.replicas, half the time through the scale subresource
// (as kubectl scale or an autoscaler would).
func (c *soak) scale(ctx context.Context) (string, error) {
	f := c.target()
	replicas := c.rng.IntN(4)
	viaScale := c.rng.IntN(2) == 0
	if viaScale {
		// A Scale object: spec.replicas whatever the Foo's version.
		patch := fmt.Sprintf(`{"spec":{"replicas":%d}}`, replicas)
		_, err := f.sp.dyn.Resource(fooGVR).Namespace(f.sp.ns).Patch(ctx, f.name, types.MergePatchType, []byte(patch),
			metav1.PatchOptions{FieldManager: "chaos-user"}, "scale")
		return fmt.Sprintf("%s replicas=%d (scale subresource)", f.name, replicas), err
	}
	return fmt.Sprintf("%s replicas=%d", f.name, replicas), c.patchFoo(ctx, f, fmt.Sprintf(`{"spec":{"deployment":{"replicas":%d}}}`, replicas))
}

func (c *soak) rename(ctx context.Context) (string, error) {
	f := c.target()
	c.nextDep++
	old := f.deployment
	f.deployment = fmt.Sprintf("%s-%d", f.name, c.nextDep)
	c.owner[f.deployment] = f.name
	return fmt.Sprintf("%s deploymentName %s -> %s", f.name, old, f.deployment),
		c.patchFoo(ctx, f, fmt.Sprintf(`{"spec":{"deployment":{"name":%q}}}`, f.deployment))
}

func (c *soak) flipPolicy(ctx context.Context) (string, error) {
	f := c.target()
	if f.policy == samplev1beta1.DeletionPolicyOrphan {
		f.policy = samplev1beta1.DeletionPolicyDelete
	} else {
		f.policy = samplev1beta1.DeletionPolicyOrphan
	}
	return fmt.Sprintf("%s deletionPolicy=%s", f.name, f.policy),
		c.patchFoo(ctx, f, fmt.Sprintf(`{"spec":{"deletionPolicy":%q}}`, f.policy))
}

// deleteFoo deletes a Foo, recording the policy it had. If it had the
// Orphan policy and already held the finalizer, the Deployment it
// controlled at that moment must be kept.
func (c *soak) deleteFoo(ctx context.Context) (string, error) {
	i := c.rng.IntN(len(c.foos))
	f := c.foos[i]
	c.foos = slices.Delete(c.foos, i, i+1)

	foo, err := f.sp.foos.SamplecontrollerV1beta1().Foos(f.sp.ns).Get(ctx, f.name, metav1.GetOptions{})
	if err != nil {
		return f.name + " (not deleted: reading it failed)", err
	}
	policy := foo.Spec.DeletionPolicy
	if policy == "" {
		policy = samplev1beta1.DeletionPolicyDelete
	}
	finalizer := plan.HasOrphanFinalizer(foo)
	keep := ""
	if policy == samplev1beta1.DeletionPolicyOrphan && finalizer {
		dep, err := f.sp.kube.AppsV1().Deployments(f.sp.ns).Get(ctx, foo.Spec.Deployment.Name, metav1.GetOptions{})
		if err == nil && dep.DeletionTimestamp == nil && plan.IsControlledBy(dep, foo.UID) {
			keep = dep.Name
		}
	}
	c.deletedWith[f.name] = policy
	err = f.sp.foos.SamplecontrollerV1beta1().Foos(f.sp.ns).Delete(ctx, f.name, metav1.DeleteOptions{
		Preconditions: &metav1.Preconditions{UID: &foo.UID},
	})
	detail := fmt.Sprintf("%s policy=%s finalizer=%t", f.name, policy, finalizer)
	if keep != "" {
		detail += " must keep " + keep
		if err == nil {
			c.mustKeep[keep] = f.name
		}
	}
	return detail, err
}

// editDeployment changes a field the controller owns, as `kubectl edit`
// would (an update under another field manager): replicas, the image, or
// the managed-by label, or the container's ports (an "http" port keyed
// 7070, which server-side apply alone cannot take back).
func (c *soak) editDeployment(ctx context.Context) (string, error) {
	f := c.target()
	what := c.rng.IntN(4)
	replicas := int32(c.rng.IntN(6))
	var detail string
	switch what {
	case 0:
		detail = fmt.Sprintf("%s replicas=%d", f.deployment, replicas)
	case 1:
		detail = f.deployment + " image=httpd:2.4"
	case 2:
		detail = f.deployment + " ports=[http:7070]"
	default:
		detail = fmt.Sprintf("%s label %s=someone-else", f.deployment, plan.ManagedByLabel)
	}
	deps := f.sp.kube.AppsV1().Deployments(f.sp.ns)
	dep, err := deps.Get(ctx, f.deployment, metav1.GetOptions{})
	if err != nil {
		return detail, err
	}
	switch what {
	case 0:
		dep.Spec.Replicas = ptr.To(replicas)
	case 1:
		if len(dep.Spec.Template.Spec.Containers) == 0 {
			return detail, errors.New("the Deployment has no container")
		}
		dep.Spec.Template.Spec.Containers[0].Image = "httpd:2.4"
	case 2:
		if len(dep.Spec.Template.Spec.Containers) == 0 {
			return detail, errors.New("the Deployment has no container")
		}
		dep.Spec.Template.Spec.Containers[0].Ports = []corev1.ContainerPort{
			{Name: plan.PortName, ContainerPort: 7070, Protocol: corev1.ProtocolTCP}}
	default:
		if dep.Labels == nil {
			dep.Labels = map[string]string{}
		}
		dep.Labels[plan.ManagedByLabel] = "someone-else"
	}
	_, err = deps.Update(ctx, dep, metav1.UpdateOptions{FieldManager: "chaos-editor"})
	return detail, err
}

// deleteDeployment deletes a Foo's Deployment, in the background or in
// the foreground (then it lingers, terminating, until its pods are gone).
func (c *soak) deleteDeployment(ctx context.Context) (string, error) {
	f := c.target()
	propagation := metav1.DeletePropagationBackground
	if c.rng.IntN(2) == 0 {
		propagation = metav1.DeletePropagationForeground
	}
	err := f.sp.kube.AppsV1().Deployments(f.sp.ns).Delete(ctx, f.deployment, metav1.DeleteOptions{PropagationPolicy: &propagation})
	return fmt.Sprintf("%s (%s)", f.deployment, propagation), err
}

// restartController stops the controller, half the time gracefully
// (SIGTERM, as in a rolling update), half the time by SIGKILL (a crash),
// and starts a new one.
func (c *soak) restartController() string {
	graceful := c.rng.IntN(2) == 0
	detail := "SIGKILL"
	if graceful {
		detail = "SIGTERM"
		// A SIGTERM that lands before main installed its handler (a
		// restart right after a start, on a loaded machine) kills the
		// process by the default action, with nothing logged: not the
		// controller's shutdown.
		if err := c.ctrl.stop(30 * time.Second); err != nil && !stoppedBeforeMain(err, c.ctrl.log) {
			c.t.Errorf("the controller did not shut down cleanly on SIGTERM (%s): %v\n%s", c.ctrl.log, err, c.ctrl.tail(30))
			detail += fmt.Sprintf(" (unclean exit: %v)", err)
		}
	} else {
		c.ctrl.kill()
	}
	c.ctrl = c.s.startController("-v=2")
	return fmt.Sprintf("%s, new log %s", detail, filepath.Base(c.ctrl.log))
}

// startMember starts a member of the shard group, over every namespace.
func (c *soak) startMember() *process {
	return c.s.launch(controllerBin, nil, shardedArgs(c.cl, c.s.ns, c.slots, "-v=2")...)
}

// member draws a member of the group.
func (c *soak) member() (int, *process) {
	i := c.rng.IntN(len(c.members))
	return i, c.members[i]
}

// killMember kills a member by SIGKILL: it releases nothing, and its slots
// wait for its member Lease to expire.
func (c *soak) killMember() string {
	i, p := c.member()
	c.members = slices.Delete(c.members, i, i+1)
	p.kill()
	return fmt.Sprintf("member %d of %d (%s); %d left", i, len(c.members)+1, filepath.Base(p.log), len(c.members))
}

// stopMember stops a member by SIGTERM (a rolling update, a scale-down):
// it hands its slots back and leaves the group, and must exit 0.
func (c *soak) stopMember() string {
	i, p := c.member()
	c.members = slices.Delete(c.members, i, i+1)
	detail := fmt.Sprintf("member %d of %d (%s); %d left", i, len(c.members)+1, filepath.Base(p.log), len(c.members))
	start := time.Now()
	err := p.stop(30 * time.Second)
	switch {
	case err == nil:
		detail += fmt.Sprintf(", exited 0 after %v", time.Since(start).Round(time.Millisecond))
	case stoppedBeforeMain(err, p.log):
		detail += " (stopped before main)"
	default:
		if why, ok := c.excusedExit(p); ok {
			detail += fmt.Sprintf(" (had lost its Lease to the API server restart: %s)", why)
			break
		}
		c.t.Errorf("a member did not shut down cleanly on SIGTERM (%s): %v\n%s", p.log, err, p.tail(30))
		detail += fmt.Sprintf(" (unclean exit: %v)", err)
	}
	return detail
}

// addMember starts one more member: the others hand it its share.
func (c *soak) addMember() string {
	p := c.startMember()
	c.members = append(c.members, p)
	return fmt.Sprintf("%s; %d members", filepath.Base(p.log), len(c.members))
}

// excusedExit says whether a member's exit by itself is what a member
// must do, not a failure: one that exited while the API server was being
// restarted, or within soakLossWindow of its return (it lost its member
// Lease, not renewed within the renew deadline, and exits so that its
// slots can be taken, as docs/sharding.md says). It returns the reason the
// member's log gives.
func (c *soak) excusedExit(p *process) (string, bool) {
	if p.running() {
		return "", false
	}
	why := "no loss logged"
	if lines := p.logLines("Lost the member Lease"); len(lines) > 0 {
		why = shorten(lines[len(lines)-1], 200)
		if i := strings.Index(why, "] "); i >= 0 {
			why = why[i+2:]
		}
	}
	for _, o := range c.outages {
		if !p.ended.Before(o[0]) && !p.ended.After(o[1].Add(soakLossWindow)) {
			return why, true
		}
	}
	return why, false
}

// restartAPIServer stops the API server for 1–3s.
func (c *soak) restartAPIServer() string {
	down := time.Duration(1000+c.rng.IntN(2001)) * time.Millisecond
	c.virtual += down
	c.lastAPIServerRestart = c.virtual
	start := time.Now()
	outage := len(c.outages)
	c.outages = append(c.outages, [2]time.Time{start, start.Add(time.Hour)}) // until it is back
	if err := c.cl.stopAPIServer(); err != nil {
		c.t.Fatalf("stopping the API server: %v", err)
	}
	stopped := time.Since(start)
	time.Sleep(down)
	start = time.Now()
	if err := c.cl.startAPIServer(); err != nil {
		c.t.Fatalf("starting the API server again: %v", err)
	}
	c.outages[outage][1] = time.Now()
	return fmt.Sprintf("stopped in %v, down %v, healthy again in %v", stopped.Round(time.Millisecond), down,
		time.Since(start).Round(time.Millisecond))
}

// checkControllers restarts a controller that exited by itself, which is
// a failure (only the test stops it), but for a member that lost its Lease
// to an API server restart (excusedExit). A member is started again in its
// place in the group, so that the model, and with it the choice of the
// next operations, does not depend on what the cluster did.
func (c *soak) checkControllers() {
	if c.slots == 0 {
		if c.ctrl.running() {
			return
		}
		c.t.Errorf("the controller exited by itself (%s): %v\n%s", c.ctrl.log, c.ctrl.err, c.ctrl.tail(40))
		c.ctrl = c.s.startController("-v=2")
		c.record(opRestartCrashed, "the controller had exited by itself", nil)
		return
	}
	for i, p := range c.members {
		if p.running() {
			continue
		}
		c.members[i] = c.startMember()
		detail := fmt.Sprintf("member %d (%s) had exited (%v) %s, started %s in its place", i, filepath.Base(p.log), p.err,
			p.ended.Format("15:04:05.000"), filepath.Base(c.members[i].log))
		if why, ok := c.excusedExit(p); ok {
			c.record(opReplaceLost, detail+": "+why, nil)
			continue
		}
		c.t.Errorf("a member exited by itself (%s), not in an API server restart: %v\n%s", p.log, p.err, p.tail(40))
		c.record(opRestartCrashed, detail, nil)
	}
}

// invariants checks the invariants in every namespace. With a shard group,
// it first replaces members that exited (checkControllers): one may lose
// its Lease to the last API server restart while the test waits.
func (c *soak) invariants() (bool, string) {
	if c.slots != 0 {
		c.checkControllers()
	}
	for _, sp := range c.spaces {
		if ok, state := sp.invariants(); !ok {
			if len(c.spaces) > 1 {
				state = sp.ns + ": " + state
			}
			return false, state
		}
	}
	return true, ""
}

// progress wraps a condition to log what it still waits for every 15s,
// so that a slow convergence shows what was slow.
func (c *soak) progress(what string, cond func() (bool, string)) func() (bool, string) {
	start, next := time.Now(), 15*time.Second
	return func() (bool, string) {
		done, state := cond()
		if waited := time.Since(start); !done && waited >= next {
			c.t.Logf("still waiting for %s after %v: %s", what, waited.Round(time.Second), state)
			next += 15 * time.Second
		}
		return done, state
	}
}

// leftovers checks what the deletion policies leave behind: a Deployment
// without a controller must be one an Orphan deletion kept; the Deployments
// of Foos deleted with the Delete policy are gone; and the ones an Orphan
// deletion had to keep are there, without an owner.
// Names are unique across namespaces (Foo names count up, and renames are
// unique), so one pass over all of them is exact.
func (c *soak) leftovers() (bool, string) {
	var (
		foos []samplev1beta1.Foo
		deps []appsv1.Deployment
	)
	for _, sp := range c.spaces {
		f, d, err := sp.listAll()
		if err != nil {
			return false, err.Error()
		}
		foos = append(foos, f.Items...)
		deps = append(deps, d.Items...)
	}
	exists := map[string]bool{}
	for _, f := range foos {
		exists[f.Name] = true
	}
	var problems []string
	present := map[string]bool{}
	for i := range deps {
		d := &deps[i]
		present[d.Name] = true
		fooName, known := c.owner[d.Name]
		policy, deleted := c.deletedWith[fooName]
		if metav1.GetControllerOf(d) == nil {
			switch {
			case !known:
				problems = append(problems, fmt.Sprintf("Deployment %s has no controller, and no Foo ever named it", d.Name))
			case exists[fooName]:
				problems = append(problems, fmt.Sprintf("Deployment %s has no controller, but its Foo %s exists", d.Name, fooName))
			case !deleted:
				problems = append(problems, fmt.Sprintf("Deployment %s has no controller; its Foo %s is gone, but the test never deleted it", d.Name, fooName))
			case policy != samplev1beta1.DeletionPolicyOrphan:
				problems = append(problems, fmt.Sprintf("Deployment %s has no controller, but its Foo %s was deleted with the %s policy", d.Name, fooName, policy))
			}
			continue
		}
		if known && deleted && !exists[fooName] && policy == samplev1beta1.DeletionPolicyDelete {
			problems = append(problems, fmt.Sprintf("Deployment %s remains, but its Foo %s was deleted with the Delete policy (owners %v)",
				d.Name, fooName, ownerNames(d.OwnerReferences)))
		}
	}
	kept := make([]string, 0, len(c.mustKeep))
	for name := range c.mustKeep {
		kept = append(kept, name)
	}
	sort.Strings(kept)
	for _, name := range kept {
		if !present[name] {
			problems = append(problems, fmt.Sprintf("Deployment %s is gone, but its Foo %s was deleted with the Orphan policy while holding the finalizer",
				name, c.mustKeep[name]))
		}
		// One still controlled is reported above or by the invariants.
	}
	if len(problems) > 8 {
		problems = append(problems[:8], fmt.Sprintf("... and %d more", len(problems)-8))
	}
	return len(problems) == 0, strings.Join(problems, "; ")
}

func ownerNames(refs []metav1.OwnerReference) []string {
	var out []string
	for _, r := range refs {
		out = append(out, r.Kind+"/"+r.Name)
	}
	return out
}

// scanControllerLogs fails the test on a data race or a panic in any of
// the controllers it ran (the binary is built with -race), and reports
// their error lines: how many, and the most frequent kinds.
func (c *soak) scanControllerLogs() {
	header := regexp.MustCompile(`^E\d{4} [\d:.]+\s+\d+ `)
	digits := regexp.MustCompile(`\d{2,}`)
	kinds := map[string]int{}
	errorLines := 0
	for _, path := range c.s.logs {
		b, err := os.ReadFile(path)
		if err != nil {
			c.t.Errorf("reading %s: %v", path, err)
			continue
		}
		for _, l := range strings.Split(string(b), "\n") {
			switch {
			case strings.Contains(l, "WARNING: DATA RACE"), strings.HasPrefix(l, "panic:"), strings.Contains(l, "Observed a panic"):
				c.t.Errorf("%s: %s", filepath.Base(path), l)
			case header.MatchString(l):
				errorLines++
				kinds[shorten(digits.ReplaceAllString(header.ReplaceAllString(l, ""), "N"), 200)]++
			}
		}
	}
	c.t.Logf("%d controller processes; %d error lines in their logs", len(c.s.logs), errorLines)
	keys := make([]string, 0, len(kinds))
	for k := range kinds {
		keys = append(keys, k)
	}
	sort.Slice(keys, func(i, j int) bool {
		return kinds[keys[i]] > kinds[keys[j]] || kinds[keys[i]] == kinds[keys[j]] && keys[i] < keys[j]
	})
	for i, k := range keys {
		if i == 5 {
			c.t.Logf("  ... and %d more kinds", len(keys)-5)
			break
		}
		c.t.Logf("  %4d× %s", kinds[k], k)
	}
}

// logCluster logs what the rest of the control plane made of the
// Deployments: pods by phase and node, and the nodes' readiness and taints.
// Available replicas need the scheduler, the kube-controller-manager and
// kwok as much as the controller; this tells their failures apart.
func (c *soak) logCluster() {
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	var pods []corev1.Pod
	for _, sp := range c.spaces {
		list, err := c.s.kube.CoreV1().Pods(sp.ns).List(ctx, metav1.ListOptions{})
		if err != nil {
			c.t.Logf("listing pods: %v", err)
			return
		}
		pods = append(pods, list.Items...)
	}
	byState := map[string]int{}
	for _, p := range pods {
		node := "unscheduled"
		if p.Spec.NodeName != "" {
			node = "on a node"
		}
		state := fmt.Sprintf("%s, %s", p.Status.Phase, node)
		if p.DeletionTimestamp != nil {
			state += ", terminating"
		}
		byState[state]++
	}
	c.t.Logf("pods in the namespaces: %v", byState)
	nodes, err := c.s.kube.CoreV1().Nodes().List(ctx, metav1.ListOptions{})
	if err != nil {
		c.t.Logf("listing nodes: %v", err)
		return
	}
	for _, n := range nodes.Items {
		ready := "unknown"
		for _, cond := range n.Status.Conditions {
			if cond.Type == "Ready" {
				ready = fmt.Sprintf("%s since %s", cond.Status, cond.LastTransitionTime.Format("15:04:05"))
			}
		}
		var taints []string
		for _, t := range n.Spec.Taints {
			taints = append(taints, t.Key+":"+string(t.Effect))
		}
		c.t.Logf("node %s: Ready %s, taints %v", n.Name, ready, taints)
	}
}

// report scans the controllers' logs, logs the count of each kind of
// operation, always, and the operation log if the test failed (all of it
// also goes to a file next to the control plane's logs).
func (c *soak) report() {
	c.scanControllerLogs()
	var b strings.Builder
	for _, op := range soakOps {
		st := c.counts[op]
		if st == nil {
			continue
		}
		fmt.Fprintf(&b, "\n  %-18s %4d", op, st.n)
		if st.failed > 0 {
			fmt.Fprintf(&b, " (%d failed)", st.failed)
		}
	}
	c.t.Logf("seed %d: %d operations:%s", c.seed, c.ops, b.String())
	if !c.t.Failed() {
		return
	}
	c.logCluster()
	path := filepath.Join(c.cl.dir, "soak-operations.log")
	if err := os.WriteFile(path, []byte(strings.Join(c.oplog, "\n")+"\n"), 0o600); err != nil {
		path = err.Error()
	}
	lines := c.oplog
	const maxLines = 400
	if len(lines) > maxLines {
		lines = append([]string{fmt.Sprintf("... %d earlier operations", len(lines)-maxLines)}, lines[len(lines)-maxLines:]...)
	}
	c.t.Logf("operation log (seed %d, replay with FOO_SOAK_SEED=%d; all of it in %s):\n%s",
		c.seed, c.seed, path, strings.Join(lines, "\n"))
}
