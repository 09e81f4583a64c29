// Package servingcerttest is a test double of certapi for operator authors: an in-memory CA that a
// servingcert.Source gets its certificates from, so that a webhook under test (in a unit test, or in an
// envtest-style test against a real kube-apiserver) becomes Ready without a certapi server.
//
// The double replaces only certapi's API, through servingcert.Options.Issuer: the Source the operator's
// code holds is the real one, with the same renewal, backoff, readiness and re-issue on a CA change. The
// certificates are made by certapi's own signer (pkg/signer, pure Go crypto), with the names, key usages
// and name constraints certapi gives them, so a client (kube-apiserver included) that trusts CABundle
// verifies them for <service>.<namespace>.svc as it would in a cluster.
//
//	ca, err := servingcerttest.NewCA(servingcerttest.Options{})
//	err = ca.AddRequest(&certapiv1alpha1.ServingCertRequest{
//		ObjectMeta: metav1.ObjectMeta{Namespace: "my-system", Name: "my-webhook"},
//		Spec:       certapiv1alpha1.ServingCertRequestSpec{ServiceName: "my-webhook"},
//	})
//	src, err := servingcert.New(servingcert.Options{Issuer: ca, Namespace: "my-system", Name: "my-webhook",
//		CAChangeDelay: time.Millisecond})
//	go src.Start(ctx)
//	// the webhook server: TLSConfig: src.TLSConfig(); its webhook configuration: caBundle: ca.CABundle()
//
// A test drives the CA as certapi's rotation does, to check the operator's reload path: PublishNext
// adds the next CA to the bundle (trust first), Rotate makes it the one that signs (Sources re-issue
// within Options.CAChangeDelay), and DropRetiring removes the old CA from the bundle. Fail makes every
// issuance fail with an error of the test's choosing, to check what the operator does while it has no
// certificate or cannot renew one.
//
// What the double does not do: it needs no RBAC and checks none, it accepts any positive duration and
// renewBefore (certapi's minimum of 1h would keep a test from seeing renewal in seconds), and nothing of
// it is stored. Everything else it refuses as certapi does: a missing ServingCertRequest (NotFound),
// names outside the request's namespace, a CSR that does not verify or has an unsupported key, and a
// ServingCert asking for more than its request's duration.
package servingcerttest
