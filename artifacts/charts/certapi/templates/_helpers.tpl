{{/* The chart's name: app.kubernetes.io/name of certapi's objects. */}}
{{- define "certapi.name" -}}
{{- default .Chart.Name .Values.nameOverride | trunc 55 | trimSuffix "-" -}}
{{- end -}}

{{/* What the objects are named after: the ServiceAccount, Service, ClusterRoles, Secrets. */}}
{{- define "certapi.fullname" -}}
{{- if .Values.fullnameOverride -}}
{{- .Values.fullnameOverride | trunc 55 | trimSuffix "-" -}}
{{- else -}}
{{- $name := default .Chart.Name .Values.nameOverride -}}
{{- if contains $name .Release.Name -}}
{{- .Release.Name | trunc 55 | trimSuffix "-" -}}
{{- else -}}
{{- printf "%s-%s" .Release.Name $name | trunc 55 | trimSuffix "-" -}}
{{- end -}}
{{- end -}}
{{- end -}}

{{/* Labels of every object: part-of, commonLabels, and (unless helmLabels is false) Helm's. */}}
{{- define "certapi.commonLabels" -}}
app.kubernetes.io/part-of: certapi
{{- with .Values.commonLabels }}
{{ toYaml . }}
{{- end }}
{{- if .Values.helmLabels }}
app.kubernetes.io/instance: {{ .Release.Name }}
app.kubernetes.io/managed-by: {{ .Release.Service }}
app.kubernetes.io/version: {{ .Values.image.tag | default .Chart.AppVersion | quote }}
helm.sh/chart: {{ printf "%s-%s" .Chart.Name .Chart.Version | replace "+" "_" }}
{{- end }}
{{- end -}}

{{/* Selector of certapi's pods. Without the release: a Deployment's selector cannot change, and these
are the same as those of the kustomize manifests, so an install can move from one to the other. */}}
{{- define "certapi.selectorLabels" -}}
app.kubernetes.io/name: {{ include "certapi.name" . }}
app.kubernetes.io/component: apiserver
{{- end -}}

{{- define "certapi.labels" -}}
{{ include "certapi.selectorLabels" . }}
{{ include "certapi.commonLabels" . }}
{{- end -}}

{{/* Labels of the helm test's objects (templates/tests): not certapi's selector. */}}
{{- define "certapi.test.labels" -}}
app.kubernetes.io/name: {{ include "certapi.name" . }}
app.kubernetes.io/component: test
{{ include "certapi.commonLabels" . }}
{{- end -}}

{{/* Annotations of the helm test's objects, created in order of "weight" (RBAC before the Pod); deleted
when the test passes, kept for `kubectl logs` when it fails until the next run. */}}
{{- define "certapi.test.annotations" -}}
helm.sh/hook: test
helm.sh/hook-weight: {{ .weight | quote }}
helm.sh/hook-delete-policy: before-hook-creation,hook-succeeded
{{- end -}}

{{- define "certapi.etcd.selectorLabels" -}}
app.kubernetes.io/name: {{ include "certapi.name" . }}-etcd
app.kubernetes.io/component: etcd
{{- end -}}

{{- define "certapi.etcd.labels" -}}
{{ include "certapi.etcd.selectorLabels" . }}
{{ include "certapi.commonLabels" . }}
{{- end -}}

{{- define "certapi.monitoring.labels" -}}
app.kubernetes.io/name: {{ include "certapi.name" . }}
app.kubernetes.io/component: monitoring
{{ include "certapi.commonLabels" . }}
{{- end -}}

{{/* The matchConditions of every ValidatingAdmissionPolicy of admission-policy.yaml: the request is made
by certapi's ServiceAccount, given by its two parameters, the namespace (the release's) and the name
(certapi.serviceAccountName), from the same values the ServiceAccount, the Deployment and the RBAC subjects are rendered
from, so the policies cannot name another account than the one certapi runs as. Not a paramKind: see
admission-policy.yaml. */}}
{{- define "certapi.policy.matchConditions" -}}
- name: certapi-serviceaccount
  expression: >-
    request.userInfo.username == 'system:serviceaccount:' + {{ .Release.Namespace | squote }} + ':' + {{ include "certapi.serviceAccountName" . | squote }}
{{- end -}}

{{/* A CEL condition: the request is for certapi's etcd peer CA Secret (etcd.mode cluster). */}}
{{- define "certapi.policy.isPeerCASecret" -}}
request.namespace == {{ .Release.Namespace | squote }} && request.name == {{ printf "%s-etcd-peer-ca" (include "certapi.fullname" .) | squote }}
{{- end -}}

{{/* The namespaces certapi's ServiceAccount may write no Secret in, as a CEL list. */}}
{{- define "certapi.policy.refusedSecretNamespaces" -}}
{{- $ns := .Values.secretDelivery.refusedNamespaces | default list -}}
{{- if .Values.secretDelivery.refuseReleaseNamespace -}}
{{- $ns = append $ns .Release.Namespace -}}
{{- end -}}
{{- $q := list -}}
{{- range ($ns | uniq) -}}
{{- $q = append $q (squote .) -}}
{{- end -}}
[{{ join ", " $q }}]
{{- end -}}

{{/* The ServiceAccount certapi runs as: serviceAccount.name, or the full name. */}}
{{- define "certapi.serviceAccountName" -}}
{{- .Values.serviceAccount.name | default (include "certapi.fullname" .) -}}
{{- end -}}

{{- define "certapi.image" -}}
{{- $repository := include "certapi.withRegistry" (dict "ref" .Values.image.repository "registry" (.Values.image.registry | default (.Values.global).imageRegistry)) -}}
{{- if .Values.image.digest -}}
{{ $repository }}@{{ .Values.image.digest }}
{{- else -}}
{{ $repository }}:{{ .Values.image.tag | default .Chart.AppVersion }}
{{- end -}}
{{- end -}}

{{/* An image reference (.ref) pulled from another registry (.registry, e.g. a mirror) when one is given:
the registry replaces the reference's own, which is its first path element when that names a host (has a
dot or a port, or is localhost, as container runtimes read it), and is put in front otherwise. */}}
{{- define "certapi.withRegistry" -}}
{{- $ref := .ref -}}
{{- with .registry -}}
{{- $parts := splitn "/" 2 $ref -}}
{{- $first := $parts._0 -}}
{{- if and $parts._1 (or (contains "." $first) (contains ":" $first) (eq $first "localhost")) -}}
{{- $ref = $parts._1 -}}
{{- end -}}
{{- $ref = printf "%s/%s" (trimSuffix "/" .) $ref -}}
{{- end -}}
{{- $ref -}}
{{- end -}}

{{/* imagePullSecrets of every pod: global.imagePullSecrets (the umbrella-chart convention) and then
imagePullSecrets, each given as {name: ...} or as a plain name. */}}
{{- define "certapi.imagePullSecrets" -}}
{{- $names := list -}}
{{- range concat ((.Values.global).imagePullSecrets | default list) (.Values.imagePullSecrets | default list) -}}
{{- $name := . -}}
{{- if kindIs "map" . }}{{ $name = .name }}{{ end -}}
{{- if and $name (not (has $name $names)) }}{{ $names = append $names $name }}{{ end -}}
{{- end -}}
{{- with $names -}}
imagePullSecrets:
{{- range . }}
- name: {{ . }}
{{- end }}
{{- end -}}
{{- end -}}

{{- define "certapi.encryptionSecretName" -}}
{{- .Values.encryption.secretName | default (printf "%s-encryption-config" (include "certapi.fullname" .)) -}}
{{- end -}}

{{- define "certapi.etcd.name" -}}
{{- include "certapi.fullname" . }}-etcd
{{- end -}}

{{- define "certapi.etcd.serverSecretName" -}}
{{- .Values.etcd.dedicated.serverSecretName | default (printf "%s-etcd-server-tls" (include "certapi.fullname" .)) -}}
{{- end -}}

{{- define "certapi.etcd.peerSecretName" -}}
{{- .Values.etcd.dedicated.peerSecretName | default (printf "%s-etcd-peer-tls" (include "certapi.fullname" .)) -}}
{{- end -}}

{{/* The Secret with certapi's etcd client certificate; empty when there is none. */}}
{{- define "certapi.etcd.clientSecretName" -}}
{{- if eq .Values.etcd.mode "dedicated" -}}
{{- .Values.etcd.dedicated.clientSecretName | default (printf "%s-etcd-client-tls" (include "certapi.fullname" .)) -}}
{{- else if eq .Values.etcd.mode "external" -}}
{{- .Values.etcd.external.clientSecretName -}}
{{- end -}}
{{- end -}}

{{/* certapi's --etcd-servers: the members of the dedicated etcd by their stable names, or the external
endpoints. */}}
{{- define "certapi.etcd.servers" -}}
{{- if eq .Values.etcd.mode "dedicated" -}}
{{- $name := include "certapi.etcd.name" . -}}
{{- $urls := list -}}
{{- range $i := until (int .Values.etcd.dedicated.members) -}}
{{- $urls = append $urls (printf "https://%s-%d.%s.%s.svc:2379" $name $i $name $.Release.Namespace) -}}
{{- end -}}
{{- join "," $urls -}}
{{- else if eq .Values.etcd.mode "external" -}}
{{- join "," .Values.etcd.external.endpoints -}}
{{- end -}}
{{- end -}}

{{/*
Whether the cluster serves certificates.k8s.io/v1 ClusterTrustBundles, for which certapi publishes its
bundle: "true" or empty. With helm install, from the cluster's discovery; with helm template (no cluster,
as artifacts/deploy is rendered), from the Kubernetes version: 1.37 or later. On an older cluster certapi
publishes no ClusterTrustBundle (its APIsServed condition says so), and the chart installs no policy for one.
*/}}
{{- define "certapi.servesClusterTrustBundles" -}}
{{- if or (.Capabilities.APIVersions.Has "certificates.k8s.io/v1/ClusterTrustBundle") (semverCompare ">=1.37.0-0" .Capabilities.KubeVersion.Version) -}}
true
{{- end -}}
{{- end -}}

{{/*
The NAME of --ca-upstream-signer-name=NAME in extraArgs (the last one, as certapi's flag parsing takes it);
empty when extraArgs has none.
*/}}
{{- define "certapi.caUpstream.signerNameFlag" -}}
{{- $name := "" -}}
{{- range .Values.extraArgs -}}
{{- if hasPrefix "--ca-upstream-signer-name=" . -}}
{{- $name = trimPrefix "--ca-upstream-signer-name=" . -}}
{{- end -}}
{{- end -}}
{{- $name -}}
{{- end -}}

{{/*
The signerName certapi's CertificateSigningRequests ask (caUpstream.certificateSigningRequests), which the
admission policy <fullname>-certificatesigningrequests allows: caUpstream.signerName, or else the flag's
(certapi.caUpstream.signerNameFlag). certapi.validate refuses neither, both differing, or a kubernetes.io/ one.
*/}}
{{- define "certapi.caUpstream.signerName" -}}
{{- .Values.caUpstream.signerName | default (include "certapi.caUpstream.signerNameFlag" .) -}}
{{- end -}}

{{/* Refuses values that cannot work, with a message that says why. */}}
{{- define "certapi.validate" -}}
{{- /* A cluster that serves the policies (helm install), or a version that does (helm template, offline). */ -}}
{{- if not (or (.Capabilities.APIVersions.Has "admissionregistration.k8s.io/v1/ValidatingAdmissionPolicy") (semverCompare ">=1.30.0-0" .Capabilities.KubeVersion.Version)) -}}
{{- fail "this cluster serves no admissionregistration.k8s.io/v1 ValidatingAdmissionPolicy: certapi needs Kubernetes 1.30 or newer" -}}
{{- end -}}
{{- $mode := .Values.etcd.mode -}}
{{- if not (has $mode (list "embedded" "dedicated" "external" "cluster")) -}}
{{- fail (printf "etcd.mode %q: want embedded, dedicated, external or cluster" $mode) -}}
{{- end -}}
{{- if and (eq $mode "embedded") (gt (int .Values.replicas) 1) -}}
{{- fail (printf "replicas %d with etcd.mode embedded: the embedded etcd is one member inside one pod; set replicas=1 (examples/values-single.yaml), or run several replicas with etcd.mode cluster (the default), dedicated or external" (int .Values.replicas)) -}}
{{- end -}}
{{- if and (eq $mode "cluster") (gt (int .Values.replicas) 9) -}}
{{- fail (printf "replicas %d with etcd.mode cluster: an etcd cluster of certapi's replicas has at most 9 members (etcd advises 3, 5 or 7), and members' ports accept only the names of ordinals 0 to 8" (int .Values.replicas)) -}}
{{- end -}}
{{- /* A running cluster scaled down to one member: the etcd leader never removes the second-last member,
so the one left would wait for it without a quorum. lookup finds nothing in helm template. */ -}}
{{- if and (eq $mode "cluster") (eq (int .Values.replicas) 1) -}}
{{- $sts := lookup "apps/v1" "StatefulSet" .Release.Namespace (include "certapi.fullname" .) -}}
{{- $running := int (dig "spec" "replicas" 0 ($sts | default dict)) -}}
{{- if gt $running 1 -}}
{{- fail (printf "replicas 1: the StatefulSet %s runs %d etcd members, and a running cluster cannot be scaled down to one (its etcd leader never shrinks a cluster to one member, so the one left would wait without a quorum); keep 3 or more, or restore a snapshot into a one-member cluster (docs/backup-and-restore.md, \"To one replica\")" (include "certapi.fullname" .) $running) -}}
{{- end -}}
{{- end -}}
{{- /* etcd.mode embedded changed to cluster: a StatefulSet started on empty claims would bootstrap a new
cluster, with a new CA and no ServingCertRequests, while the embedded member's data sits in its kept claim.
Refused until the first member's claim holds that data (the documented snapshot and restore makes it).
lookup finds nothing in helm template (Argo CD, Flux): there certapi's own guard holds, the first member
refuses to bootstrap a first cluster while the APIService holds a CA bundle certapi published
(pkg/etcdcluster DecideStart, rule 4); this one only refuses earlier, before anything changed. */ -}}
{{- if eq $mode "cluster" -}}
{{- $fullname := include "certapi.fullname" . -}}
{{- $embeddedClaim := printf "%s-data" $fullname -}}
{{- $firstClaim := printf "data-%s-0" $fullname -}}
{{- if and (not (lookup "apps/v1" "StatefulSet" .Release.Namespace $fullname)) (lookup "v1" "PersistentVolumeClaim" .Release.Namespace $embeddedClaim) (not (lookup "v1" "PersistentVolumeClaim" .Release.Namespace $firstClaim)) -}}
{{- fail (printf "etcd.mode cluster: the PersistentVolumeClaim %s holds the data of etcd.mode embedded (the CA and every ServingCertRequest), and a cluster started now would be a new one, with a new CA. Move that data into the cluster with a snapshot restored into %s first (docs/backup-and-restore.md, \"From one embedded member to a cluster\"), or delete %s if its data is not wanted" $embeddedClaim $firstClaim $embeddedClaim) -}}
{{- end -}}
{{- end -}}
{{- if and (eq $mode "external") (empty .Values.etcd.external.endpoints) -}}
{{- fail "etcd.mode external needs etcd.external.endpoints: the client URLs of your etcd" -}}
{{- end -}}
{{- if and (eq $mode "dedicated") (not (has (int .Values.etcd.dedicated.members) (list 1 3 5))) -}}
{{- fail (printf "etcd.dedicated.members %v: want 1, 3 or 5 (an odd number keeps a quorum)" .Values.etcd.dedicated.members) -}}
{{- end -}}
{{- if and (not .Values.encryption.enabled) .Values.encryption.required -}}
{{- fail "encryption.enabled false with encryption.required true: certapi would refuse to start; set encryption.required false too (the CA keys are then stored unencrypted)" -}}
{{- end -}}
{{- if and .Values.encryption.config (not (contains "certificateauthoritykeys.certapi.dev" .Values.encryption.config)) -}}
{{- fail "encryption.config does not list certificateauthoritykeys.certapi.dev: certapi's CA keys would be stored unencrypted (and with encryption.required it refuses to start)" -}}
{{- end -}}
{{- if not (has .Values.podAntiAffinity (list "soft" "hard" "none")) -}}
{{- fail (printf "podAntiAffinity %q: want soft, hard or none" .Values.podAntiAffinity) -}}
{{- end -}}
{{- if and (not .Values.serviceAccount.create) (not .Values.serviceAccount.name) -}}
{{- fail "serviceAccount.create false needs serviceAccount.name: the existing ServiceAccount certapi runs as, which the chart's ClusterRoles and admission policies are bound to" -}}
{{- end -}}
{{- if and (has "--ca-upstream=CertificateSigningRequest" .Values.extraArgs) (not .Values.caUpstream.certificateSigningRequests) -}}
{{- fail "extraArgs has --ca-upstream=CertificateSigningRequest: set caUpstream.certificateSigningRequests=true too, which lets certapi create, read and delete CertificateSigningRequests (never approve them)" -}}
{{- end -}}
{{- with .Values.caKeyPlugin -}}
{{- if .enabled -}}
{{- range $v := list "image" "module" "tokenLabel" "pinSecret" -}}
{{- if not (get $.Values.caKeyPlugin $v) -}}
{{- fail (printf "caKeyPlugin.enabled needs caKeyPlugin.%s: the plugin's image, the PKCS#11 module's path in it, the token's label and the Secret with the token's PIN (docs/ca-custody.md)" $v) -}}
{{- end -}}
{{- end -}}
{{- end -}}
{{- end -}}
{{- range .Values.extraArgs -}}
{{- if hasPrefix "--ca-key-plugin" . -}}
{{- fail (printf "extraArgs has %s: set caKeyPlugin instead, which runs the plugin beside certapi in each pod and passes certapi the socket and the timeout" .) -}}
{{- end -}}
{{- end -}}
{{- /* caUpstream.certificateSigningRequests: the admission policy <fullname>-certificatesigningrequests lets
certapi's ServiceAccount ask one signer, the one certapi asks; the chart must know it, and it must be the
flag's. It is written into a CEL string, so it must be a signerName and nothing more. */ -}}
{{- if .Values.caUpstream.certificateSigningRequests -}}
{{- $flag := include "certapi.caUpstream.signerNameFlag" . -}}
{{- $signer := include "certapi.caUpstream.signerName" . -}}
{{- if and $flag .Values.caUpstream.signerName (ne $flag .Values.caUpstream.signerName) -}}
{{- fail (printf "caUpstream.signerName %q and --ca-upstream-signer-name=%s in extraArgs differ: the admission policy would refuse every CertificateSigningRequest certapi makes" .Values.caUpstream.signerName $flag) -}}
{{- end -}}
{{- if not $signer -}}
{{- fail "caUpstream.certificateSigningRequests needs the signerName certapi asks: set caUpstream.signerName, or --ca-upstream-signer-name=NAME in extraArgs; the admission policy lets certapi's ServiceAccount create CertificateSigningRequests for that signer only" -}}
{{- end -}}
{{- if not (regexMatch "^[a-z0-9]([-a-z0-9.]*[a-z0-9])?/[A-Za-z0-9]([-A-Za-z0-9_.]*[A-Za-z0-9])?$" $signer) -}}
{{- fail (printf "the signerName %q (caUpstream.signerName or --ca-upstream-signer-name): want a domain, a slash and a name, e.g. clusterissuers.cert-manager.io/org-intermediate" $signer) -}}
{{- end -}}
{{- if hasPrefix "kubernetes.io/" $signer -}}
{{- fail (printf "the signerName %q (caUpstream.signerName or --ca-upstream-signer-name) is one of Kubernetes' own signers, which issue no CA certificates: name the organisation's signer" $signer) -}}
{{- end -}}
{{- if and (has "--ca-upstream=CertificateSigningRequest" .Values.extraArgs) (not $flag) (not (has "--ca-upstream-signer-name" .Values.extraArgs)) -}}
{{- fail (printf "extraArgs has --ca-upstream=CertificateSigningRequest but no --ca-upstream-signer-name, which certapi requires: add --ca-upstream-signer-name=%s (caUpstream.signerName does not set the flag)" $signer) -}}
{{- end -}}
{{- end -}}
{{- if not (has .Values.etcd.dedicated.podAntiAffinity (list "required" "preferred")) -}}
{{- fail (printf "etcd.dedicated.podAntiAffinity %q: want required or preferred" .Values.etcd.dedicated.podAntiAffinity) -}}
{{- end -}}
{{- end -}}

{{/*
The --snapshot-interval certapi runs with: snapshots.interval, whose default "auto" is 1h wherever the
snapshots have somewhere to go without a choice of the user's (etcd.mode cluster or embedded, whose data
volume keeps them, or a snapshots.existingClaim), and none with an external or dedicated etcd and no
claim (that etcd is backed up by whoever runs it). Empty: none.
*/}}
{{- define "certapi.snapshotInterval" -}}
{{- $interval := .Values.snapshots.interval -}}
{{- if eq $interval "auto" -}}
{{- if or (eq .Values.etcd.mode "cluster") (eq .Values.etcd.mode "embedded") .Values.snapshots.existingClaim -}}1h{{- end -}}
{{- else -}}
{{- $interval -}}
{{- end -}}
{{- end -}}
