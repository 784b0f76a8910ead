package rerun

import (
	"context"
	"fmt"
	"strconv"
	"time"

	"github.com/go-logr/logr"
	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"k8s.io/apimachinery/pkg/runtime/schema"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/client-go/tools/events"
	"sigs.k8s.io/controller-runtime/pkg/client"
	"sigs.k8s.io/controller-runtime/pkg/reconcile"

	"github.com/runner-guard/runner-guard/ghclient"
	"github.com/runner-guard/runner-guard/internal/jobannotation"
)

// OfflineOptions configure an Offline, as Options configure Setup.
type OfflineOptions struct {
	// API holds the records (in Namespace) and ARC's Secrets.
	API            client.Client
	Namespace      string
	Guard          Guard
	JobKeys        *jobannotation.Keyring
	ARCCredentials bool
	StaticBaseURL  string
	Client         func(*ghclient.Credentials) (Runs, error)
	Exclude        Exclusions
	Enabled        bool
	MaxPerRun      int
	Events         events.EventRecorder
	Metrics        *Metrics
	Now            func() time.Time
}

// Offline is the lost-job watch and the re-run controller without a
// manager, caches or watches: the bench hands it deleted pods and asks it to
// decide runs, as the controllers would, one call at a time. It keeps
// nothing but the records in API: a new Offline over the same API is a
// restart.
type Offline struct {
	w *lossWatch
	r *runReconciler
}

// NewOffline decides as Setup's controllers with the same options do.
func NewOffline(oo OfflineOptions) *Offline {
	o := Options{
		Namespace: oo.Namespace, Guard: oo.Guard, JobKeys: oo.JobKeys, ARCCredentials: oo.ARCCredentials, StaticBaseURL: oo.StaticBaseURL,
		Client: oo.Client, Exclude: oo.Exclude, Enabled: oo.Enabled, MaxPerRun: oo.MaxPerRun,
		Events: oo.Events, Metrics: oo.Metrics, Log: logr.Discard(), Now: oo.Now,
	}.withDefaults()
	// PodDeleted sets the watch's reader: the one runner it hands over.
	return &Offline{w: newLossWatch(o, nil, oo.API, oo.API, true), r: newRunReconciler(o, oo.API, oo.API, oo.API)}
}

// PodDeleted hands over a deleted runner pod with the EphemeralRunner the
// cache holds under its name (nil: none): a job it went away holding is
// recorded, or counted at once with the outcome that says why not.
func (o *Offline) PodDeleted(ctx context.Context, pod *corev1.Pod, er *unstructured.Unstructured) error {
	o.w.reader = oneRunner{er}
	l, ok := o.w.lost(ctx, pod)
	if !ok {
		return nil
	}
	k := types.NamespacedName{Namespace: pod.Namespace, Name: pod.Name}
	o.w.mu.Lock()
	o.w.pending[k] = l
	o.w.mu.Unlock()
	_, err := o.w.Reconcile(ctx, reconcile.Request{NamespacedName: k})
	return err
}

// Decide asks about the records of the run once, as a reconcile does, and
// returns when to ask again (0: every record is decided).
func (o *Offline) Decide(ctx context.Context, runID int64) (time.Duration, error) {
	res, err := o.r.Reconcile(ctx, reconcile.Request{NamespacedName: types.NamespacedName{Namespace: o.r.namespace, Name: strconv.FormatInt(runID, 10)}})
	return res.RequeueAfter, err
}

// oneRunner is a cache holding one EphemeralRunner; it cannot tell a
// pod's node (the cause is then how the pod was deleted).
type oneRunner struct{ er *unstructured.Unstructured }

func (c oneRunner) Get(_ context.Context, key client.ObjectKey, obj client.Object, _ ...client.GetOption) error {
	if _, ok := obj.(*corev1.Node); ok {
		return fmt.Errorf("the offline cache holds no Nodes")
	}
	u, ok := obj.(*unstructured.Unstructured)
	if ok && c.er != nil && c.er.GetNamespace() == key.Namespace && c.er.GetName() == key.Name {
		c.er.DeepCopyInto(u)
		return nil
	}
	return apierrors.NewNotFound(schema.GroupResource{}, key.Name)
}

func (c oneRunner) List(context.Context, client.ObjectList, ...client.ListOption) error {
	return fmt.Errorf("the offline cache lists nothing")
}
