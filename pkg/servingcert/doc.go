// Package servingcert gives an operator's webhook (or any in-cluster TLS server) its serving certificate
// from certapi, held in memory and renewed without a restart.
//
// A Source makes a private key in memory, sends a PKCS#10 request for it to the servingcerts subresource of
// one ServingCertRequest (servingcertrequests/{name}/servingcerts, a synchronous call), and serves the
// certificate through GetCertificate. It renews at the certificate's renewalTime, less a random part of up
// to Options.Jitter of the time left (so that N replicas do not renew at the same instant), with a new key
// each time; it re-issues within Options.CAChangeDelay (default MaxCAChangeDelay) when
// CertificateAuthority/default names a new Active CA;
// and it retries every failure with exponential backoff and jitter, bounded by Options.MaxBackoff, logging
// each failure with the time left before the certificate expires. No Secret, file, volume or restart is
// involved, so the two classic failures cannot happen:
//
//   - A server started before its certificate exists does not crash or exit: handshakes fail (the client
//     sees an internal_error alert) until the first certificate arrives, and Ready, WaitReady and Checker
//     say when it has. Gate readiness on Checker, not process start.
//   - A certificate is never loaded once and forgotten: GetCertificate reads the current one on every
//     handshake, and the Source replaces it well before notAfter.
//
// # Wiring
//
// Create the Source, run Start in a goroutine for the life of the process, and give the server its TLS
// configuration:
//
//	src, err := servingcert.New(servingcert.Options{RestConfig: cfg, Namespace: ns, Name: "my-webhook"})
//	go src.Start(ctx)
//	srv := &http.Server{Addr: ":9443", Handler: mux, TLSConfig: src.TLSConfig()}
//	err = srv.ListenAndServeTLS("", "") // no files: the certificate comes from src
//
// With controller-runtime, give TLSOpts to the webhook server (it then reads no CertDir), add the Source to
// the manager (it reports NeedLeaderElection false, so every replica runs it, as every replica serves) and
// use Checker as a readiness check, as the example operator artifacts/examples/webhook of certapi's
// repository does (this module does not require controller-runtime):
//
//	mgr, err := manager.New(cfg, manager.Options{
//		WebhookServer: webhook.NewServer(webhook.Options{TLSOpts: src.TLSOpts()}),
//	})
//	err = mgr.Add(src)
//	err = mgr.AddReadyzCheck("serving-cert", src.Checker())
//
// A server that copies the certificate instead of calling GetCertificate on every handshake (the dynamic
// serving certificate of a k8s.io/apiserver generic server, as certapi itself serves with a Source)
// registers with AddListener and reads GetCertificate when told.
//
// The ServingCertRequest names the Service; clients connect to <service>.<namespace>.svc and trust
// CABundle (kube-apiserver gets it through certapi's caBundle injection: annotate the webhook
// configuration with certapi.dev/inject-ca-bundle: "true").
//
// # RBAC
//
// The Source's client (usually the operator's ServiceAccount) needs, in the request's namespace, create on
// the servingcerts subresource of its own request, which RBAC can limit by name:
//
//	apiVersion: rbac.authorization.k8s.io/v1
//	kind: Role
//	metadata: {name: my-webhook-serving-cert, namespace: my-system}
//	rules:
//	- apiGroups: [certapi.dev]
//	  resources: [servingcertrequests/servingcerts]
//	  resourceNames: [my-webhook]
//	  verbs: [create]
//
// Re-issuing on a CA change (on by default; Options.DisableCAWatch turns it off) needs watch on the
// cluster-scoped CertificateAuthority "default". Without it the Source logs the refusal once and still
// renews at every renewalTime; since certapi keeps a retired CA in the bundle for as long as any certificate
// it signed can be valid, that is safe, only slower to move to the new CA:
//
//	apiVersion: rbac.authorization.k8s.io/v1
//	kind: ClusterRole
//	metadata: {name: certapi-ca-reader}
//	rules:
//	- apiGroups: [certapi.dev]
//	  resources: [certificateauthorities]
//	  resourceNames: [default]
//	  verbs: [watch]
//
// (bound with a ClusterRoleBinding; the watch uses the field selector metadata.name=default, which is
// what lets resourceNames apply to it, and starts without a resource version, so it needs no get or list).
//
// Options.CreateIfMissing additionally needs create on servingcertrequests in the namespace, which RBAC
// cannot limit by name: whoever holds it may obtain certificates for every Service in the namespace. Prefer
// shipping the ServingCertRequest with the operator's manifests and leaving CreateIfMissing nil. When set,
// the request is created only if the issuance call finds it missing; an existing request's spec is never
// changed.
//
// # When renewal keeps failing
//
// While the current certificate is valid the Source keeps serving it, stays Ready, and logs every failed
// attempt at info level with the time left. Once it has expired, the Source still serves it (a verifying
// client then fails with "x509: certificate has expired or is not yet valid", which names the cause, rather
// than with an opaque handshake alert), logs every attempt at error level, and reports not Ready through
// Ready, WaitReady and Checker until a renewal succeeds. No verifying client accepts an expired
// certificate, so serving it changes only how clearly the failure is reported.
//
// Each issuance call is bounded by Options.RequestTimeout (default 30s), which includes client-go's own
// retries of a 503 with Retry-After.
//
// # In an operator's tests
//
// Options.Issuer replaces certapi's API with anything that implements the three calls of Issuer. Package
// servingcerttest has one: an in-memory CA on certapi's own signer, which a test can rotate and make fail.
// The Source is the same either way, so a webhook under test becomes Ready, serves and reloads exactly as
// in a cluster, without a certapi server.
package servingcert
