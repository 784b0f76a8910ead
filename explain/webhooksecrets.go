package explain

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"path"
	"slices"
	"strings"
	"time"

	appsv1 "k8s.io/api/apps/v1"
	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/client-go/kubernetes"
	"sigs.k8s.io/yaml"

	"github.com/runner-guard/runner-guard/events"
	"github.com/runner-guard/runner-guard/internal/jobannotation"
)

// The webhook secret flags of runner-guard's Deployment (cmd/webhook/events.go).
const (
	flagSecretFile = "github-webhook-secret-file"
	flagSecrets    = "github-webhook-secrets"
)

// readWebhookSecrets reads, with the user's credentials, the webhook secrets
// runner-guard's Deployment verifies runner-guard.io/job with: the Secret
// behind --github-webhook-secret-file, or the ConfigMap behind
// --github-webhook-secrets and the Secrets behind the files it names. What
// cannot be read is recorded, with the permission that would read it, never
// returned as an error. The values only build the keyring: they are never
// printed. now tells time for the previous values' windows.
func readWebhookSecrets(ctx context.Context, kube kubernetes.Interface, dep *appsv1.Deployment, inst Install, guardNS string, now func() time.Time) WebhookSecrets {
	out := WebhookSecrets{Each: map[string]error{}}
	switch {
	case inst.Needs != "":
		out.All = &forbiddenError{What: "runner-guard's Deployment (which webhook secrets it reads)", Need: inst.Needs}
		return out
	case dep == nil:
		out.All = fmt.Errorf("no runner-guard Deployment (label %s) in namespace %s, so its webhook secrets are unknown (pass --guard-namespace)", installLabel, guardNS)
		return out
	}
	r := &objectReader{ctx: ctx, kube: kube, ns: dep.Namespace}
	var secrets []jobannotation.Secret
	if file := flagValue(dep, flagSecretFile); file != "" {
		out.Flag = "--" + flagSecretFile + "=" + file
		b, err := r.secretFile(dep, file)
		if err != nil {
			out.All = fmt.Errorf("%s: %w", out.Flag, err)
		} else {
			secrets = append(secrets, jobannotation.Secret{Value: b})
		}
	} else if file := flagValue(dep, flagSecrets); file != "" {
		out.Flag = "--" + flagSecrets + "=" + file
		entries, err := r.secretsEntries(dep, file)
		if err != nil {
			out.All = fmt.Errorf("%s: %w", out.Flag, err)
		}
		seen := map[string]bool{}
		for _, e := range entries {
			if seen[e.Name] {
				continue // the binary refuses a name twice: it does not run so
			}
			seen[e.Name] = true
			s, err := r.secretsEntry(dep, e)
			if err != nil {
				out.Each[e.Name] = fmt.Errorf("webhook secret %q: %w", e.Name, err)
			}
			if len(s.Value) > 0 {
				secrets = append(secrets, s)
			}
		}
	}
	keys, err := jobannotation.NewKeyring(secrets, now)
	if err != nil {
		out.All = fmt.Errorf("webhook secrets: %w", err)
		keys, _ = jobannotation.NewKeyring(nil, now) // no secret: cannot fail
	}
	out.Keys = keys
	return out
}

// secretsEntry reads one entry of --github-webhook-secrets: the secret and
// its previous value. An error with a Value set is a previous value that
// could not be read.
func (r *objectReader) secretsEntry(dep *appsv1.Deployment, e events.SecretsEntry) (jobannotation.Secret, error) {
	s := jobannotation.Secret{Name: e.Name}
	if e.SecretFile == "" {
		return s, errors.New("the entry names no secretFile")
	}
	var err error
	if s.Value, err = r.secretFile(dep, e.SecretFile); err != nil {
		return s, fmt.Errorf("secretFile %s: %w", e.SecretFile, err)
	}
	if e.PreviousSecretFile == "" {
		return s, nil
	}
	until, err := time.Parse(time.RFC3339, e.PreviousUntil)
	if err != nil {
		return s, fmt.Errorf("previousUntil %q: %w", e.PreviousUntil, err)
	}
	prev, err := r.secretFile(dep, e.PreviousSecretFile)
	if err != nil {
		return s, fmt.Errorf("previousSecretFile %s: %w", e.PreviousSecretFile, err)
	}
	s.Previous, s.PreviousUntil = prev, until
	return s, nil
}

// secretFile reads a secret file of the webhook container from the object
// it is mounted from, as the binary reads the file: without its trailing
// newlines, and not empty.
func (r *objectReader) secretFile(dep *appsv1.Deployment, file string) ([]byte, error) {
	var b []byte
	err := r.eachMounted(dep, file, false, func(_ objectKey, files [][]byte) error {
		b = files[0]
		return nil
	})
	if err != nil {
		return nil, err
	}
	b = bytes.TrimRight(b, "\r\n")
	if len(b) == 0 {
		return nil, errors.New("the secret is empty")
	}
	return b, nil
}

// secretsEntries reads the file (or every *.yaml, *.yml and *.json file of
// the directory) of --github-webhook-secrets from the ConfigMap it is
// mounted from.
func (r *objectReader) secretsEntries(dep *appsv1.Deployment, file string) ([]events.SecretsEntry, error) {
	var entries []events.SecretsEntry
	err := r.eachMounted(dep, file, true, func(from objectKey, files [][]byte) error {
		for _, b := range files {
			var f events.SecretsFile
			if err := yaml.Unmarshal(b, &f); err != nil {
				return fmt.Errorf("%s: %w", r.name(from), err)
			}
			entries = append(entries, f.Secrets...)
		}
		return nil
	})
	if err != nil {
		return nil, err
	}
	if len(entries) == 0 {
		return nil, errors.New("it names no secret")
	}
	return entries, nil
}

// eachMounted hands use what file, a path in the webhook container, reads
// from the sources it is mounted from, in the volume's order: a file is the
// first source holding its key (a source without it is passed over while
// another follows); a directory (only with dirs) is every source's files.
func (r *objectReader) eachMounted(dep *appsv1.Deployment, file string, dirs bool, use func(from objectKey, files [][]byte) error) error {
	keys, err := mountedFrom(dep, file)
	if err != nil {
		return err
	}
	for i, k := range keys {
		var files [][]byte
		switch {
		case k.Key != "":
			var b []byte
			b, err = r.key(k)
			files = [][]byte{b}
		case dirs:
			files, err = r.dir(k)
		default:
			return fmt.Errorf("the directory of %s, not a file", r.name(k))
		}
		var missing *missingKeyError
		if errors.As(err, &missing) && i < len(keys)-1 {
			continue // another source of the projected volume may hold it
		}
		if err != nil {
			return err
		}
		if err := use(k, files); err != nil {
			return err
		}
		if k.Key != "" {
			return nil // the file: one source holds it
		}
	}
	return nil
}

// objectKey is where a file of the webhook container comes from: a key of a
// Secret or ConfigMap of the Deployment's namespace, or ("" Key) the whole
// object as a directory, of Items when the volume lists them.
type objectKey struct {
	Kind, Name, Key string
	Items           []corev1.KeyToPath
}

// mountedFrom resolves file, a path in the webhook container, to the
// Secret or ConfigMap keys it may be mounted from: the deepest mount holding
// it, its subPath and the volume's items, as the kubelet lays them out. A
// projected volume without items may hold it in any of its sources.
func mountedFrom(dep *appsv1.Deployment, file string) ([]objectKey, error) {
	c := webhookContainer(dep)
	if c == nil {
		return nil, errors.New("runner-guard's Deployment has no container")
	}
	var mount *corev1.VolumeMount
	var rel string
	for i, m := range c.VolumeMounts {
		dir := strings.TrimSuffix(m.MountPath, "/")
		r, ok := strings.CutPrefix(file, dir+"/")
		if file == dir {
			r, ok = "", true
		}
		if ok && (mount == nil || len(dir) > len(strings.TrimSuffix(mount.MountPath, "/"))) {
			mount, rel = &c.VolumeMounts[i], r
		}
	}
	if mount == nil {
		return nil, fmt.Errorf("on no volume of container %s (in the image?)", c.Name)
	}
	if mount.SubPathExpr != "" {
		return nil, fmt.Errorf("mounted with subPathExpr %q, which explain does not expand", mount.SubPathExpr)
	}
	rel = path.Join(mount.SubPath, rel)
	if rel == "." {
		rel = ""
	}
	var vol *corev1.Volume
	for i, v := range dep.Spec.Template.Spec.Volumes {
		if v.Name == mount.Name {
			vol = &dep.Spec.Template.Spec.Volumes[i]
		}
	}
	switch {
	case vol == nil:
		return nil, fmt.Errorf("the Deployment has no volume %q", mount.Name)
	case vol.Secret != nil:
		k, err := keyAt("Secret", vol.Secret.SecretName, vol.Secret.Items, rel)
		return []objectKey{k}, err
	case vol.ConfigMap != nil:
		k, err := keyAt("ConfigMap", vol.ConfigMap.Name, vol.ConfigMap.Items, rel)
		return []objectKey{k}, err
	case vol.Projected != nil:
		var keys []objectKey
		for _, src := range vol.Projected.Sources {
			var k objectKey
			var err error
			switch {
			case src.Secret != nil:
				k, err = keyAt("Secret", src.Secret.Name, src.Secret.Items, rel)
			case src.ConfigMap != nil:
				k, err = keyAt("ConfigMap", src.ConfigMap.Name, src.ConfigMap.Items, rel)
			default:
				continue
			}
			switch {
			case err != nil:
				continue // its items do not lay it out at rel
			case k.Key != "" && len(k.Items) == 0 && listsItems(src):
				return []objectKey{k}, nil // its items lay it out at rel: this source holds it
			}
			keys = append(keys, k)
		}
		if len(keys) == 0 {
			return nil, fmt.Errorf("no source of projected volume %q holds it", vol.Name)
		}
		return keys, nil
	}
	return nil, fmt.Errorf("volume %q is neither a Secret nor a ConfigMap", vol.Name)
}

// listsItems reports whether a projected volume's source lists its items.
func listsItems(src corev1.VolumeProjection) bool {
	return src.Secret != nil && len(src.Secret.Items) > 0 || src.ConfigMap != nil && len(src.ConfigMap.Items) > 0
}

// keyAt is the key of the object laid out at rel in its volume: the item
// whose path it is, or, without items, the key of that name. rel "" is the
// volume's root: the object as a directory.
func keyAt(kind, name string, items []corev1.KeyToPath, rel string) (objectKey, error) {
	k := objectKey{Kind: kind, Name: name}
	if rel == "" {
		k.Items = items
		return k, nil
	}
	if len(items) == 0 {
		if strings.Contains(rel, "/") {
			return k, fmt.Errorf("%s %s has no key %q: a key holds no directory", kind, name, rel)
		}
		k.Key = rel
		return k, nil
	}
	for _, it := range items {
		if path.Clean(it.Path) == rel {
			k.Key = it.Key
			return k, nil
		}
	}
	return k, fmt.Errorf("the volume of %s %s lists no item at path %q", kind, name, rel)
}

// missingKeyError is an object without the key a file is mounted from.
type missingKeyError struct{ Object, Key string }

func (e *missingKeyError) Error() string { return fmt.Sprintf("%s has no key %q", e.Object, e.Key) }

// objectReader reads Secrets and ConfigMaps of one namespace, each once.
type objectReader struct {
	ctx  context.Context
	kube kubernetes.Interface
	ns   string
	read map[string]objectData
}

type objectData struct {
	data map[string][]byte
	err  error
}

func (r *objectReader) name(k objectKey) string { return k.Kind + " " + r.ns + "/" + k.Name }

// object reads a Secret's or ConfigMap's data.
func (r *objectReader) object(k objectKey) (map[string][]byte, error) {
	id := k.Kind + "/" + k.Name
	if d, ok := r.read[id]; ok {
		return d.data, d.err
	}
	data := map[string][]byte{}
	var err error
	switch k.Kind {
	case "Secret":
		var s *corev1.Secret
		if s, err = r.kube.CoreV1().Secrets(r.ns).Get(r.ctx, k.Name, metav1.GetOptions{}); err == nil {
			data = s.Data
		}
	default:
		var cm *corev1.ConfigMap
		if cm, err = r.kube.CoreV1().ConfigMaps(r.ns).Get(r.ctx, k.Name, metav1.GetOptions{}); err == nil {
			for key, v := range cm.Data {
				data[key] = []byte(v)
			}
			for key, v := range cm.BinaryData {
				data[key] = v
			}
		}
	}
	switch {
	case apierrors.IsForbidden(err):
		err = &forbiddenError{What: r.name(k), Need: needs("get", strings.ToLower(k.Kind)+"s", r.ns) + " (" + k.Name + ")"}
	case apierrors.IsNotFound(err):
		err = fmt.Errorf("%s does not exist", r.name(k))
	case err != nil:
		err = fmt.Errorf("read %s: %w", r.name(k), err)
	}
	if r.read == nil {
		r.read = map[string]objectData{}
	}
	r.read[id] = objectData{data: data, err: err}
	return data, err
}

// key reads one key of an object.
func (r *objectReader) key(k objectKey) ([]byte, error) {
	data, err := r.object(k)
	if err != nil {
		return nil, err
	}
	b, ok := data[k.Key]
	if !ok {
		return nil, &missingKeyError{Object: r.name(k), Key: k.Key}
	}
	return b, nil
}

// dir reads the *.yaml, *.yml and *.json files of an object mounted as a
// directory, in the order of their names, as the binary lists them.
func (r *objectReader) dir(k objectKey) ([][]byte, error) {
	data, err := r.object(k)
	if err != nil {
		return nil, err
	}
	files := map[string]string{} // file name → key
	if len(k.Items) == 0 {
		for key := range data {
			files[key] = key
		}
	}
	for _, it := range k.Items {
		if !strings.Contains(path.Clean(it.Path), "/") {
			files[path.Clean(it.Path)] = it.Key
		}
	}
	var names []string
	for name := range files {
		if ext := path.Ext(name); ext == ".yaml" || ext == ".yml" || ext == ".json" {
			names = append(names, name)
		}
	}
	slices.Sort(names)
	var out [][]byte
	for _, name := range names {
		if b, ok := data[files[name]]; ok {
			out = append(out, b)
		}
	}
	return out, nil
}
