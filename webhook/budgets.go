package webhook

import (
	"context"
	"crypto/sha256"
	"encoding/hex"
	"encoding/json"
	"fmt"
	"slices"
	"sync"
	"time"

	"github.com/go-logr/logr"
	coordinationv1 "k8s.io/api/coordination/v1"
	corev1 "k8s.io/api/core/v1"
	policyv1 "k8s.io/api/policy/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"
	"sigs.k8s.io/controller-runtime/pkg/client"
)

// This file is the budget ledger: the evictions this replica let through
// that a PodDisruptionBudget does not show yet, and their reservations
// shared with the other replicas in the budget's Lease. The Lease's reserve
// loop lives here, beside the ledger, because after every read of the Lease
// it recounts this replica's own evictions in flight under the ledger's
// mutex (admitsWith): a count taken before the loop would over-admit. An
// eviction's decision enters the file once to reserve (ReserveFor) and, when
// the eviction is refused under a shared budget, once more from settle to
// give the Lease reservation back (Reservations.release).

// budgetHoldSlack is how long past the API server's deadline an admitted
// eviction the budget never showed still counts.
const budgetHoldSlack = 10 * time.Second

// ReserveFor is an eviction's whole look at its budgets, the one call
// resolve and the drain make of the ledger (pods seen going, the budgets
// listed, the one charged, a disruption reserved). It names the
// PodDisruptionBudget for which the API server's eviction subresource would
// refuse evicting the pod now (blocking), once the evictions let through
// under it and the API server has not yet accounted for are counted (this
// replica's, and the other replicas' reservations in the budget's Lease);
// else it reserves one of the budget's disruptions for this eviction
// (hold). pods are read to see evictions go (a cache will do), budgets to
// list the PodDisruptionBudgets. A failed read of the budgets blocks
// nothing: the API server checks them itself after the webhooks. A failed
// reservation blocks (reserveErr): the budget allows the eviction, but
// another replica may have taken the last disruption, and the runner must
// not be unregistered for an eviction the API server then refuses.
func (l *BudgetLedger) ReserveFor(ctx context.Context, pods, budgets client.Reader, pod *corev1.Pod) (blocking string, several []string, inFlight int, hold BudgetHold, reserveErr error) {
	log := logr.FromContextOrDiscard(ctx)
	read := l.SeePods(ctx, pods, pod.Namespace)
	pdbs, listed := listBudgets(ctx, budgets, pod.Namespace)
	if !listed {
		return "", nil, 0, BudgetHold{}, nil
	}
	charged, several := ChargedBudget(pod, BudgetsThatCount(pdbs))
	if charged == nil {
		return "", several, 0, BudgetHold{}, nil
	}
	for look := 1; ; look++ {
		hold, inFlight, ok, unseen, err := l.reserveShared(ctx, charged, pod, read)
		switch {
		case err != nil:
			log.Info("cannot reserve a disruption with the other replicas; the eviction waits", "budget", charged.Name, "error", err.Error())
			return charged.Name, nil, inFlight, BudgetHold{}, err
		case ok:
			return "", nil, 0, hold, nil
		case unseen > 0 && look < 2:
			// Other replicas' reservations this ledger learnt of only now
			// blocked: SeePods never looked at their pods, which may be gone
			// already, their evictions shown by the budget. Look once more,
			// at the same budget read again (the pod's budgets were matched
			// a moment ago; the API server checks them again anyway).
			read = l.SeePods(ctx, pods, pod.Namespace)
			if pdbs, listed = listBudgets(ctx, budgets, pod.Namespace); !listed {
				return "", nil, 0, BudgetHold{}, nil
			}
			if charged = budgetNamed(pdbs, charged.Name); charged == nil {
				return "", nil, 0, BudgetHold{}, nil
			}
			continue
		}
		return charged.Name, nil, inFlight, BudgetHold{}, nil
	}
}

// listBudgets lists namespace's PodDisruptionBudgets; a failure is logged
// and blocks nothing: the API server checks them itself after the webhooks.
func listBudgets(ctx context.Context, budgets client.Reader, namespace string) ([]policyv1.PodDisruptionBudget, bool) {
	var pdbs policyv1.PodDisruptionBudgetList
	if err := budgets.List(ctx, &pdbs, client.InNamespace(namespace)); err != nil {
		logr.FromContextOrDiscard(ctx).V(1).Info("cannot list PodDisruptionBudgets; the API server will check them", "error", err.Error())
		return nil, false
	}
	return pdbs.Items, true
}

// budgetNamed is the budget of pdbs named name, nil when it is gone.
func budgetNamed(pdbs []policyv1.PodDisruptionBudget, name string) *policyv1.PodDisruptionBudget {
	for i := range pdbs {
		if pdbs[i].Name == name {
			return &pdbs[i]
		}
	}
	return nil
}

// BudgetsThatCount are the PodDisruptionBudgets rule 5d and the drain weigh
// an eviction against: a namespace's budgets but the job budgets runner-guard
// keeps itself (IsJobBudget), which are its own knowledge, not a user's.
func BudgetsThatCount(pdbs []policyv1.PodDisruptionBudget) []policyv1.PodDisruptionBudget {
	return WithoutJobBudgets(pdbs)
}

// budgetRefuses reports a budget the API server's checkAndDecrement refuses
// an eviction with, once inFlight more evictions than it accounts for are
// taken from its disruptionsAllowed.
func budgetRefuses(pdb *policyv1.PodDisruptionBudget, inFlight int) bool {
	return pdb.Status.ObservedGeneration < pdb.Generation ||
		pdb.Status.DisruptionsAllowed-int32(inFlight) < 1 ||
		len(pdb.Status.DisruptedPods) > maxDisruptedPods
}

// BudgetLedger counts, per PodDisruptionBudget, the evictions this replica
// admitted (or its drain made) that the API server has not yet accounted for
// in the budget. The API server checks budgets only after the webhooks, so
// evictions sent at once would each see the same disruptionsAllowed and each
// get their runner unregistered; the ledger takes those in flight off it.
//
// An eviction counts from Reserve until the budget read shows it: its pod in
// status.disruptedPods (the eviction's own write), its pod seen going before
// the budget was read (SeePods: the disruption controller clears
// disruptedPods once the pod is deleted), or a resourceVersion
// other than the one read at Reserve once the answer is older than the API
// server's deadline (by then the eviction's write is done, and the
// disruption controller may have cleared disruptedPods since). A new
// version alone is not enough sooner: another eviction's write makes one
// while this eviction is still on its way. One the API server never made
// (another webhook refused it) stops counting after hold. Other replicas'
// evictions are not counted.
//
// Reviews read budgets side by side, so what one review learns (a pod gone,
// a budget showing an eviction) holds only for reads begun after it: a
// read begun earlier may predate the eviction's write. Each such fact is
// stamped with the ledger's clock, each read starts from SeePods' stamp,
// and an eviction accounted for after a read began still counts for that
// read. Accounted evictions are dropped once no read begun before can still
// be deciding (settle).
type BudgetLedger struct {
	// settle is the API server's deadline for a review; hold, settle and
	// budgetHoldSlack.
	settle, hold time.Duration
	now          func() time.Time

	// shared, when set, shares reservations with the other replicas
	// (reserveShared).
	shared *Reservations

	mu       sync.Mutex
	byBudget map[types.NamespacedName]map[types.UID]*inFlightEviction
	// foreign are the other replicas' reservations under each budget, as
	// the budget's Lease last showed them: what this replica learnt of them
	// (accounted) lives here; whether they count is the Lease's word.
	foreign map[types.NamespacedName]map[types.UID]*inFlightEviction
	// clock orders what the ledger learns against the budget reads.
	clock ReadStamp
}

// ReadStamp is a point on a ledger's clock: SeePods returns the one a budget
// read that follows starts at, for Reserve.
type ReadStamp uint64

// inFlightEviction is one eviction the budget does not show yet.
type inFlightEviction struct {
	pod      string
	version  string // the budget's resourceVersion at Reserve
	since    time.Time
	answered time.Time // zero until Admitted
	// accounted is when the ledger first learnt the budget shows this
	// eviction (its pod seen terminating or gone, the eviction's write being
	// made before the pod's deletion; or a budget read listing it in
	// disruptedPods); zero until then. Reads begun after it show the
	// eviction; reads begun before may not.
	accounted   ReadStamp
	accountedAt time.Time
	// holders are the holds on this eviction not yet settled: a review's
	// and the drain's of one pod may overlap, and one giving its hold back
	// must not drop the other's. shared: one of them wrote the
	// reservation into the budget's Lease.
	holders int
	shared  bool
	// looked: SeePods has looked at the pod of this other replica's
	// reservation.
	looked bool
}

// NewBudgetLedger returns a ledger for reviews the API server gives deadline
// (--webhook-timeout).
func NewBudgetLedger(deadline time.Duration, now func() time.Time) *BudgetLedger {
	if now == nil {
		now = time.Now
	}
	return &BudgetLedger{settle: deadline, hold: deadline + budgetHoldSlack, now: now,
		byBudget: map[types.NamespacedName]map[types.UID]*inFlightEviction{},
		foreign:  map[types.NamespacedName]map[types.UID]*inFlightEviction{}}
}

// Share has reserveShared share this ledger's reservations with the other
// replicas through s; nil shares nothing. Call it before the ledger is used.
func (l *BudgetLedger) Share(s *Reservations) { l.shared = s }

// BudgetHold is one reserved eviction; the zero value holds nothing.
type BudgetHold struct {
	ledger  *BudgetLedger
	budget  types.NamespacedName
	pod     types.UID
	podName string
	// read is what the hold was taken against, for the decision's log.
	read BudgetRead
}

// BudgetRead is what a reservation was taken against: the budget's
// disruptionsAllowed and resourceVersion as read, and the evictions counted
// in flight beside it.
type BudgetRead struct {
	Allowed  int32
	Version  string
	InFlight int
}

// Reserve takes one of pdb's disruptions for pod's eviction, pdb being the
// budget just read that the eviction is charged to (ChargedBudget), the read
// having begun at read (SeePods' stamp). It reports false, reserving
// nothing, when the budget refuses the eviction once the evictions in flight
// under it are counted; inFlight is their number. A pod that already holds a
// reservation shares it (one more holder) and is not counted twice. A nil
// ledger counts nothing.
func (l *BudgetLedger) Reserve(pdb *policyv1.PodDisruptionBudget, pod *corev1.Pod, read ReadStamp) (hold BudgetHold, inFlight int, ok bool) {
	if l == nil {
		return BudgetHold{}, 0, !budgetRefuses(pdb, 0)
	}
	key := types.NamespacedName{Namespace: pdb.Namespace, Name: pdb.Name}
	l.mu.Lock()
	defer l.mu.Unlock()
	entries := l.prune(key, pdb)
	_, held := entries[pod.UID]
	inFlight = l.counted(entries, pdb, read, pod.UID)
	if budgetRefuses(pdb, inFlight) {
		return BudgetHold{}, inFlight, false
	}
	hold = BudgetHold{ledger: l, budget: key, pod: pod.UID, podName: pod.Name,
		read: BudgetRead{Allowed: pdb.Status.DisruptionsAllowed, Version: pdb.ResourceVersion, InFlight: inFlight}}
	if !held {
		if entries == nil {
			entries = map[types.UID]*inFlightEviction{}
			l.byBudget[key] = entries
		}
		entries[pod.UID] = &inFlightEviction{pod: pod.Name, version: pdb.ResourceVersion, since: l.now()}
	}
	entries[pod.UID].holders++
	return hold, inFlight, true
}

// reserveShared is Reserve, and then, when the ledger is shared (Share),
// the reservation taken in the budget's Lease too, counting the other
// replicas' reservations there (those the read does not show: their pod
// neither in status.disruptedPods nor seen going before read, and not
// expired) besides this replica's own (Reserve's, counted once). unseen is
// how many of those counted the ledger had not known before this read. An
// error (the Lease cannot be read or written, or was found unreadable)
// reserves nothing: the eviction must wait, not pass uncounted.
func (l *BudgetLedger) reserveShared(ctx context.Context, pdb *policyv1.PodDisruptionBudget, pod *corev1.Pod, read ReadStamp) (hold BudgetHold, inFlight int, ok bool, unseen int, err error) {
	hold, inFlight, ok = l.Reserve(pdb, pod, read)
	if l == nil || l.shared == nil || !ok {
		return hold, inFlight, ok, 0, nil
	}
	key := types.NamespacedName{Namespace: pdb.Namespace, Name: pdb.Name}
	inFlight, ok, wrote, err := l.shared.reserve(ctx, reservationRequest{budget: key, pod: pod.Name, podUID: pod.UID, now: l.now(), hold: l.hold,
		admits: func(others []reservation) (int, bool) {
			n, notLooked, admits := l.admitsWith(key, pdb, read, pod.UID, others)
			unseen = notLooked
			return n, admits
		}})
	if err != nil || !ok {
		hold.Cancel()
		return BudgetHold{}, inFlight, false, unseen, err
	}
	hold.read.InFlight = inFlight
	if wrote {
		l.mu.Lock()
		if e := l.byBudget[key][pod.UID]; e != nil {
			e.shared = true
		}
		l.mu.Unlock()
	}
	return hold, inFlight, true, 0, nil
}

// admitsWith counts the evictions in flight under pdb for a read begun at
// read, others being the other replicas' live reservations in its Lease,
// and reports whether the budget still allows self's eviction; unseen is
// how many of the others it counts the ledger did not know before (SeePods
// has not looked at their pods).
func (l *BudgetLedger) admitsWith(key types.NamespacedName, pdb *policyv1.PodDisruptionBudget, read ReadStamp, self types.UID, others []reservation) (n, unseen int, ok bool) {
	l.mu.Lock()
	defer l.mu.Unlock()
	entries := l.prune(key, pdb)
	n = l.counted(entries, pdb, read, self)
	known := l.noteForeign(key, pdb, others)
	seen := map[types.UID]bool{}
	for _, r := range others {
		if r.PodUID == self || seen[r.PodUID] {
			continue
		}
		seen[r.PodUID] = true
		if _, mine := entries[r.PodUID]; mine {
			continue // this replica's ledger counts that eviction already
		}
		if _, shown := pdb.Status.DisruptedPods[r.Pod]; shown {
			continue
		}
		if e := known[r.PodUID]; e != nil && e.accounted != 0 && e.accounted < read {
			continue
		}
		n++
		if e := known[r.PodUID]; e != nil && !e.looked {
			unseen++
		}
	}
	return n, unseen, !budgetRefuses(pdb, n)
}

// noteForeign keeps what the ledger knows of the other replicas'
// reservations under key, as of the Lease's others: new ones are added (for
// SeePods to look at their pods), those gone from the Lease dropped (at
// worst, one counted again), those pdb shows accounted for. l.mu is held.
func (l *BudgetLedger) noteForeign(key types.NamespacedName, pdb *policyv1.PodDisruptionBudget, others []reservation) map[types.UID]*inFlightEviction {
	old := l.foreign[key]
	known := make(map[types.UID]*inFlightEviction, len(others))
	for _, r := range others {
		e := old[r.PodUID]
		if e == nil || e.pod != r.Pod {
			e = &inFlightEviction{pod: r.Pod, since: r.Expires.Add(-l.hold)}
		}
		if _, shown := pdb.Status.DisruptedPods[r.Pod]; shown {
			l.account(e)
		}
		known[r.PodUID] = e
	}
	if len(known) == 0 {
		delete(l.foreign, key)
	} else {
		l.foreign[key] = known
	}
	return known
}

// pruneForeign forgets the other replicas' reservations in namespace that
// have expired, so a budget no review reads again leaves no pod for
// SeePods to look at. l.mu is held.
func (l *BudgetLedger) pruneForeign(namespace string) {
	now := l.now()
	for key, entries := range l.foreign {
		if key.Namespace != namespace {
			continue
		}
		for uid, e := range entries {
			if now.Sub(e.since) > l.hold {
				delete(entries, uid)
			}
		}
		if len(entries) == 0 {
			delete(l.foreign, key)
		}
	}
}

// InFlight is how many evictions under pdb, read from read on, the ledger
// counts.
func (l *BudgetLedger) InFlight(pdb *policyv1.PodDisruptionBudget, read ReadStamp) int {
	l.mu.Lock()
	defer l.mu.Unlock()
	key := types.NamespacedName{Namespace: pdb.Namespace, Name: pdb.Name}
	return l.counted(l.prune(key, pdb), pdb, read, "")
}

// counted is how many of entries a read of pdb begun at read does not show,
// but self's. l.mu is held.
func (l *BudgetLedger) counted(entries map[types.UID]*inFlightEviction, pdb *policyv1.PodDisruptionBudget, read ReadStamp, self types.UID) int {
	n := 0
	for uid, e := range entries {
		if _, shown := pdb.Status.DisruptedPods[e.pod]; uid == self || shown || (e.accounted != 0 && e.accounted < read) {
			continue
		}
		n++
	}
	return n
}

// prune notes the evictions pdb shows, drops those accounted for long
// enough that no read begun before can still be deciding, or held too long,
// and returns the rest. l.mu is held.
func (l *BudgetLedger) prune(key types.NamespacedName, pdb *policyv1.PodDisruptionBudget) map[types.UID]*inFlightEviction {
	entries := l.byBudget[key]
	now := l.now()
	for uid, e := range entries {
		if _, shown := pdb.Status.DisruptedPods[e.pod]; shown {
			l.account(e)
		}
		settled := !e.answered.IsZero() && now.Sub(e.answered) > l.settle
		if (e.accounted != 0 && now.Sub(e.accountedAt) > l.settle) || (settled && pdb.ResourceVersion != e.version) || now.Sub(e.since) > l.hold {
			delete(entries, uid)
		}
	}
	if len(entries) == 0 {
		delete(l.byBudget, key)
		return nil
	}
	return entries
}

// account stamps e accounted for now, once. l.mu is held.
func (l *BudgetLedger) account(e *inFlightEviction) {
	if e.accounted == 0 {
		l.clock++
		e.accounted, e.accountedAt = l.clock, l.now()
	}
}

// Budget names the reserved budget ("" for the zero hold).
func (h BudgetHold) Budget() string { return h.budget.Name }

// Read is what the hold was taken against.
func (h BudgetHold) Read() BudgetRead { return h.read }

// SeePods reads the pods of the evictions in flight in namespace and notes
// those terminating or gone, and returns the stamp a budget read begun after
// it starts at (for Reserve). Call it before reading the namespace's
// budgets: the API server writes an eviction into its budget before it
// deletes the pod, so a budget read after the pod was seen going shows the
// eviction even when the disruption controller has already cleared
// disruptedPods. A failed read notes nothing (the eviction keeps counting).
// pods may be a cache: a pod seen going there is gone from the API server.
func (l *BudgetLedger) SeePods(ctx context.Context, pods client.Reader, namespace string) ReadStamp {
	if l == nil {
		return 0
	}
	type pending struct {
		name string
		uid  types.UID
	}
	var want []pending
	l.mu.Lock()
	l.pruneForeign(namespace)
	for _, byBudget := range []map[types.NamespacedName]map[types.UID]*inFlightEviction{l.byBudget, l.foreign} {
		for key, entries := range byBudget {
			if key.Namespace != namespace {
				continue
			}
			for uid, e := range entries {
				if e.accounted == 0 {
					want = append(want, pending{e.pod, uid})
					e.looked = true
				}
			}
		}
	}
	l.mu.Unlock()
	for _, p := range want {
		pod := &corev1.Pod{}
		err := pods.Get(ctx, types.NamespacedName{Namespace: namespace, Name: p.name}, pod)
		if err != nil && !apierrors.IsNotFound(err) {
			continue
		}
		if err == nil && pod.UID == p.uid && pod.DeletionTimestamp == nil {
			continue
		}
		l.mu.Lock()
		for _, byBudget := range []map[types.NamespacedName]map[types.UID]*inFlightEviction{l.byBudget, l.foreign} {
			for key, entries := range byBudget {
				if e := entries[p.uid]; key.Namespace == namespace && e != nil {
					l.account(e)
				}
			}
		}
		l.mu.Unlock()
	}
	l.mu.Lock()
	defer l.mu.Unlock()
	l.clock++
	return l.clock
}

// ReservationLeaseName is the name of the Lease holding the reservations of
// the budget named pdb: the prefix and the name, or, when that is longer
// than an object name may be, a cut of it and a hash of the whole name.
func ReservationLeaseName(pdb string) string {
	const maxName = 253
	name := ReservationLeasePrefix + pdb
	if len(name) <= maxName {
		return name
	}
	sum := sha256.Sum256([]byte(pdb))
	hash := hex.EncodeToString(sum[:])[:16]
	return name[:maxName-len(hash)-1] + "-" + hash
}

// parseReservations reads an annotation's value; "" is no reservations. A
// value that is not what runner-guard writes is an error: an entry
// without its fields, or one that expires further ahead than a reservation
// may (maxAhead from now), which would hold the budget for ever.
func parseReservations(value string, now time.Time, maxAhead time.Duration) (reservationState, error) {
	var s reservationState
	if value == "" {
		return s, nil
	}
	if err := json.Unmarshal([]byte(value), &s); err != nil {
		return reservationState{}, fmt.Errorf("%s: %w", ReservationsAnnotation, err)
	}
	limit := now.Add(maxAhead)
	for i, r := range s.Reservations {
		switch {
		case r.Replica == "" || r.Pod == "" || r.PodUID == "" || r.Expires.IsZero():
			return reservationState{}, fmt.Errorf("%s: reservation %d lacks replica, pod, podUID or expires", ReservationsAnnotation, i)
		case r.Expires.After(limit):
			return reservationState{}, fmt.Errorf("%s: reservation %d expires at %s, later than any reservation may", ReservationsAnnotation, i, r.Expires.UTC().Format(time.RFC3339))
		}
	}
	if u := s.UnreadableUntil; u != nil && u.After(limit) {
		return reservationState{}, fmt.Errorf("%s: unreadableUntil %s is later than any reservation may last", ReservationsAnnotation, u.UTC().Format(time.RFC3339))
	}
	return s, nil
}

// live is s without the reservations expired at now.
func (s reservationState) live(now time.Time) reservationState {
	out := reservationState{UnreadableUntil: s.UnreadableUntil}
	if out.UnreadableUntil != nil && !out.UnreadableUntil.After(now) {
		out.UnreadableUntil = nil
	}
	for _, r := range s.Reservations {
		if r.Expires.After(now) {
			out.Reservations = append(out.Reservations, r)
		}
	}
	return out
}

// holds reports whether replica holds a reservation for pod.
func (s reservationState) holds(replica string, pod types.UID) bool {
	return slices.ContainsFunc(s.Reservations, func(r reservation) bool { return r.Replica == replica && r.PodUID == pod })
}

// without is s less replica's reservation for pod.
func (s reservationState) without(replica string, pod types.UID) reservationState {
	s.Reservations = slices.DeleteFunc(slices.Clone(s.Reservations), func(r reservation) bool { return r.Replica == replica && r.PodUID == pod })
	return s
}

func (s reservationState) encode() (string, error) {
	b, err := json.Marshal(s)
	if err != nil {
		return "", fmt.Errorf("encode reservations: %w", err)
	}
	return string(b), nil
}

// reserve takes req's reservation in its budget's Lease: created when
// absent, else updated under the resourceVersion read; a lost race is read
// again and the winner's reservations counted. It reports whether it wrote
// a reservation (false: this replica held one already, or the budget refuses).
func (s *Reservations) reserve(ctx context.Context, req reservationRequest) (inFlight int, ok, wrote bool, err error) {
	key := types.NamespacedName{Namespace: req.budget.Namespace, Name: ReservationLeaseName(req.budget.Name)}
	for range maxReservationAttempts {
		lease := &coordinationv1.Lease{}
		found := true
		if err := s.client.Get(ctx, key, lease); apierrors.IsNotFound(err) {
			found = false
		} else if err != nil {
			return 0, false, false, fmt.Errorf("read Lease %s: %w", key, err)
		}
		state, perr := parseReservations(lease.Annotations[ReservationsAnnotation], req.now, 2*req.hold)
		if perr != nil {
			// Reservations runner-guard cannot read may still be in flight:
			// count the budget full until any such has expired, and write
			// that down in place of the nonsense.
			s.log.Error(perr, "a budget's reservations are unreadable (edited by hand?); rewriting them, and every disruption counts as reserved until they would have expired",
				"lease", key.String(), "budget", req.budget.Name, "value", truncate(lease.Annotations[ReservationsAnnotation], 256))
			until := req.now.Add(req.hold)
			err := s.write(ctx, lease, key, req.budget.Name, found, reservationState{UnreadableUntil: &until})
			if apierrors.IsConflict(err) || apierrors.IsAlreadyExists(err) {
				continue
			}
			if err != nil {
				return 0, false, false, err
			}
			return 0, false, false, fmt.Errorf("reservations in Lease %s: %w: %w; every disruption counts as reserved until %s", key, ErrReservationsUnreadable, perr, until.UTC().Format(time.RFC3339))
		}
		state = state.live(req.now)
		if u := state.UnreadableUntil; u != nil {
			return 0, false, false, fmt.Errorf("reservations in Lease %s: %w; every disruption counts as reserved until %s", key, ErrReservationsUnreadable, u.UTC().Format(time.RFC3339))
		}
		var others []reservation
		for _, r := range state.Reservations {
			if r.Replica != s.replica {
				others = append(others, r)
			}
		}
		if inFlight, ok = req.admits(others); !ok {
			return inFlight, false, false, nil
		}
		if state.holds(s.replica, req.podUID) {
			return inFlight, true, false, nil
		}
		state.Reservations = append(state.Reservations, reservation{Replica: s.replica, Pod: req.pod, PodUID: req.podUID, Expires: req.now.Add(req.hold)})
		err := s.write(ctx, lease, key, req.budget.Name, found, state)
		if apierrors.IsConflict(err) || apierrors.IsAlreadyExists(err) {
			continue // another replica wrote first: count its reservations
		}
		if err != nil {
			return 0, false, false, err
		}
		return inFlight, true, true, nil
	}
	return 0, false, false, fmt.Errorf("reservations in Lease %s: other replicas kept writing it (%d attempts)", key, maxReservationAttempts)
}

// giveBack is release within reservationReleaseTimeout, its failure logged
// (the reservation then expires).
func (s *Reservations) giveBack(budget types.NamespacedName, pod types.UID, podName string, now time.Time, hold time.Duration) {
	ctx, cancel := context.WithTimeout(context.Background(), reservationReleaseTimeout)
	defer cancel()
	if err := s.release(ctx, budget, pod, now, hold); err != nil {
		s.log.Error(err, "cannot give back a budget reservation; it expires", "budget", budget.String(), "pod", podName)
	}
}

// release gives back this replica's reservation for pod under budget,
// dropping the expired ones with it. A Lease gone or unreadable has nothing
// of it to give back.
func (s *Reservations) release(ctx context.Context, budget types.NamespacedName, pod types.UID, now time.Time, hold time.Duration) error {
	key := types.NamespacedName{Namespace: budget.Namespace, Name: ReservationLeaseName(budget.Name)}
	for range maxReservationAttempts {
		lease := &coordinationv1.Lease{}
		if err := s.client.Get(ctx, key, lease); apierrors.IsNotFound(err) {
			return nil
		} else if err != nil {
			return fmt.Errorf("read Lease %s: %w", key, err)
		}
		state, err := parseReservations(lease.Annotations[ReservationsAnnotation], now, 2*hold)
		if err != nil || !state.holds(s.replica, pod) {
			return nil
		}
		err = s.write(ctx, lease, key, budget.Name, true, state.without(s.replica, pod).live(now))
		if apierrors.IsConflict(err) {
			continue
		}
		return err
	}
	return fmt.Errorf("reservations in Lease %s: other replicas kept writing it (%d attempts)", key, maxReservationAttempts)
}

// write stores state in lease: created when it was not found, else
// updated with the resourceVersion it was read at as precondition.
func (s *Reservations) write(ctx context.Context, lease *coordinationv1.Lease, key types.NamespacedName, budget string, found bool, state reservationState) error {
	value, err := state.encode()
	if err != nil {
		return err
	}
	if !found {
		lease = &coordinationv1.Lease{ObjectMeta: metav1.ObjectMeta{Namespace: key.Namespace, Name: key.Name,
			Labels: map[string]string{"app.kubernetes.io/managed-by": "runner-guard", "app.kubernetes.io/component": ReservationLeaseComponent}}}
	}
	if lease.Annotations == nil {
		lease.Annotations = map[string]string{}
	}
	lease.Annotations[ReservationsAnnotation] = value
	lease.Annotations[ReservationBudgetAnnotation] = budget
	if !found {
		if err := s.client.Create(ctx, lease); err != nil {
			return fmt.Errorf("create Lease %s: %w", key, err)
		}
		return nil
	}
	if err := s.client.Update(ctx, lease); err != nil {
		return fmt.Errorf("update Lease %s: %w", key, err)
	}
	return nil
}

// truncate cuts s to n bytes for a log line.
func truncate(s string, n int) string {
	if len(s) <= n {
		return s
	}
	return s[:n] + "…"
}
