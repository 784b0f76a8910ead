package webhook

import (
	"crypto/rand"
	"encoding/hex"
	"errors"
	"fmt"
	"time"

	"github.com/go-logr/logr"
	"k8s.io/apimachinery/pkg/types"
	"sigs.k8s.io/controller-runtime/pkg/client"
)

// This file is the format of the Leases replicas share budget reservations
// through, and this replica's handle on them. The reserve loop and the
// release that read and write them live with the ledger (budgets.go), whose
// count the loop takes anew after every read of a Lease.

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
