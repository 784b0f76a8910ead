package webhook

import (
	"context"
	"crypto/rand"
	"crypto/sha256"
	"encoding/hex"
	"encoding/json"
	"errors"
	"fmt"
	"slices"
	"time"

	"github.com/go-logr/logr"
	coordinationv1 "k8s.io/api/coordination/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"
	"sigs.k8s.io/controller-runtime/pkg/client"
)

// Reservations of a budget's disruptions are shared between replicas in one
// coordination.k8s.io/v1 Lease per PodDisruptionBudget, in the budget's
// namespace, written with a resourceVersion precondition.
const (
	// ReservationLeasePrefix starts the name of a budget's Lease.
	ReservationLeasePrefix = "runner-guard-pdb-"
	// ReservationsAnnotation holds the reservations (reservationState, JSON).
	ReservationsAnnotation = "runner-guard.io/reservations"
	// ReservationBudgetAnnotation names the budget a Lease holds reservations of.
	ReservationBudgetAnnotation = "runner-guard.io/budget"
	// ReservationLeaseComponent is the Lease's app.kubernetes.io/component label.
	ReservationLeaseComponent = "budget-reservations"
	// maxReservationAttempts bounds the writes one reservation tries when
	// other replicas keep winning the race; the review then refuses (retry).
	maxReservationAttempts = 32
	// reservationReleaseTimeout bounds giving a reservation back.
	reservationReleaseTimeout = 2 * time.Second
)

// ErrReservationsUnreadable: a budget's Lease held reservations runner-guard
// could not read (edited by hand); it was rewritten, and every disruption of
// the budget counts as reserved until the reservations it may have held
// have expired.
var ErrReservationsUnreadable = errors.New("the budget's reservations were unreadable")

// Reservations shares the disruptions one replica reserves under each
// PodDisruptionBudget with the others, through the API server.
type Reservations struct {
	client client.Client
	// replica names this process: its pod, and a part drawn at start so a
	// restarted container does not take its predecessor's reservations for
	// its own.
	replica string
	log     logr.Logger
}

// NewReservations shares reservations through c (a live client, granted
// get, create and update on Leases in the guarded namespaces) as replica
// (ReplicaIdentity).
func NewReservations(c client.Client, replica string, log logr.Logger) *Reservations {
	return &Reservations{client: c, replica: replica, log: log}
}

// Replica is the name this replica writes in its reservations.
func (s *Reservations) Replica() string { return s.replica }

// ReplicaIdentity names this process in the reservations it writes: its pod
// (POD_NAME, else the hostname, which is the pod's name) and a random part.
func ReplicaIdentity(pod string) (string, error) {
	b := make([]byte, 4)
	if _, err := rand.Read(b); err != nil {
		return "", fmt.Errorf("replica identity: %w", err)
	}
	return pod + "/" + hex.EncodeToString(b), nil
}

// reservation is one disruption a replica reserved for an eviction.
type reservation struct {
	Replica string    `json:"replica"`
	Pod     string    `json:"pod"`
	PodUID  types.UID `json:"podUID"`
	Expires time.Time `json:"expires"`
}

// reservationState is the annotation's value.
type reservationState struct {
	Reservations []reservation `json:"reservations"`
	// UnreadableUntil: the Lease was found unreadable and rewritten; every
	// disruption counts as reserved until then.
	UnreadableUntil *time.Time `json:"unreadableUntil,omitempty"`
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

// reservationRequest is one reservation to take under a budget.
type reservationRequest struct {
	budget types.NamespacedName
	pod    string
	podUID types.UID
	// now and hold: the reservation expires at now+hold; a Lease found
	// unreadable counts every disruption reserved until then.
	now  time.Time
	hold time.Duration
	// admits says whether the budget still allows the eviction once the
	// other replicas' live reservations are counted, and how many it
	// counted.
	admits func(others []reservation) (inFlight int, ok bool)
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
