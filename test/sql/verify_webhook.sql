-- outbox.verify_webhook: Standard Webhooks verification for receivers of our webhooks.
CREATE EXTENSION outbox;
\set SHOW_CONTEXT never
-- The Standard Webhooks reference vector (signed in 2021: stale for the default tolerance).
\set secret '''whsec_MfKQ9r8GKYqrTwjUPD8ILPZIo2LaLaSw'''
\set headers '''{"webhook-id": "msg_p5jXN8AQM9LWM0D4loKWxJek", "webhook-timestamp": "1614265330", "webhook-signature": "v1,g0hM9SsE+OTPJTGt/tmIKtSyZlE3uFJELVlNIOLJ1OE="}'''
\set body 'convert_to(''{"test": 2432232314}'', ''UTF8'')'
SELECT outbox.verify_webhook(ARRAY[:secret], :headers, :body, '100 years') AS reference_vector;
SELECT outbox.verify_webhook(ARRAY[:secret], :headers, :body) AS stale_by_default;
SELECT outbox.verify_webhook(ARRAY[:secret], :headers, convert_to('{"test": 2432232315}', 'UTF8'), '100 years') AS tampered_body;
SELECT outbox.verify_webhook(ARRAY['whsec_Zm9vYmFyYmF6cXV4'], :headers, :body, '100 years') AS wrong_secret;
-- Rotation: any of several secrets; header names in any case.
SELECT outbox.verify_webhook(ARRAY['whsec_Zm9vYmFyYmF6cXV4', :secret],
    '{"Webhook-Id": "msg_p5jXN8AQM9LWM0D4loKWxJek", "WEBHOOK-TIMESTAMP": "1614265330",
      "webhook-Signature": "v1,AAAA v1,g0hM9SsE+OTPJTGt/tmIKtSyZlE3uFJELVlNIOLJ1OE="}', :body, '100 years') AS rotated;
-- v1a: the RFC 8032 TEST 1 public key checks the ed25519 signature of the same message.
SELECT outbox.verify_webhook(ARRAY['whpk_11qYAYKxCrfVS/7TyWQHOg7hcvPapiMlrwIaaPcHURo='],
    '{"webhook-id": "msg_p5jXN8AQM9LWM0D4loKWxJek", "webhook-timestamp": "1614265330",
      "webhook-signature": "v1a,fldxM4gAKugP6nnt1hdz3sgGfZ6d99nzrMFnZOELIxbzEHoVmAb2ADpkJK7zgPePmPsle0zV9jSeGlHFG2NVAw=="}',
    :body, '100 years') AS v1a;
-- A v1 secret does not accept a v1a signature.
SELECT outbox.verify_webhook(ARRAY[:secret],
    '{"webhook-id": "msg_p5jXN8AQM9LWM0D4loKWxJek", "webhook-timestamp": "1614265330",
      "webhook-signature": "v1a,fldxM4gAKugP6nnt1hdz3sgGfZ6d99nzrMFnZOELIxbzEHoVmAb2ADpkJK7zgPePmPsle0zV9jSeGlHFG2NVAw=="}',
    :body, '100 years') AS v1a_with_a_v1_secret;
-- A header missing, or null: false.
SELECT outbox.verify_webhook(ARRAY[:secret], :headers::jsonb - 'webhook-timestamp', :body, '100 years') AS no_timestamp;
SELECT outbox.verify_webhook(ARRAY[:secret], jsonb_set(:headers::jsonb, '{webhook-signature}', 'null'), :body, '100 years') AS null_signature;
SELECT outbox.verify_webhook(NULL, :headers, :body) IS NULL AS null_secrets_give_null;
-- Malformed secrets are errors with their SQLSTATE, never quoted.
SELECT outbox.verify_webhook(ARRAY[:secret, 'whsec_TOPSECRET!!'], :headers, :body);
\echo :SQLSTATE
SELECT outbox.verify_webhook(ARRAY['whsk_nWGxne/9WmC6hEr0kuwsxERJxWl7MmkZcDusAxyuf2A='], :headers, :body);
\echo :SQLSTATE
SELECT outbox.verify_webhook(ARRAY['whpk_Zm9vYmFy'], :headers, :body);
\echo :SQLSTATE
SELECT outbox.verify_webhook('{}', :headers, :body);
\echo :SQLSTATE
SELECT outbox.verify_webhook(ARRAY[:secret, NULL], :headers, :body);
\echo :SQLSTATE
SELECT outbox.verify_webhook(ARRAY[:secret], :headers, :body, '-1 second');
\echo :SQLSTATE
DROP EXTENSION outbox;
