#!/usr/bin/env bash
# Certificates for a TLS deployment (docker-compose.tls.yml): a CA, and the SuperLink's
# key and certificate signed by it. Clients need only ca.crt.
#
#   docker/make-certs.sh [OUT_DIR] [HOST ...]
#
# OUT_DIR defaults to docker/certs. The certificate is valid for `superlink` (the compose
# service), `localhost`, 127.0.0.1 and every HOST given: add the name or IP address that
# clients on other hosts dial (`thinwire client --superlink HOST:8000`).
set -euo pipefail

out="${1:-$(dirname "$0")/certs}"
shift || true
days=365

mkdir -p "$out"
cd "$out"

names="DNS:superlink,DNS:localhost,IP:127.0.0.1"
for host in "$@"; do
  if [[ "$host" =~ ^[0-9.]+$ || "$host" == *:* ]]; then
    names="$names,IP:$host"
  else
    names="$names,DNS:$host"
  fi
done

openssl req -x509 -newkey ec -pkeyopt ec_paramgen_curve:prime256v1 -nodes \
  -keyout ca.key -out ca.crt -days "$days" -subj "/CN=thinwire run CA" \
  -addext "basicConstraints=critical,CA:TRUE" -addext "keyUsage=critical,keyCertSign,cRLSign" \
  2>/dev/null
openssl req -newkey ec -pkeyopt ec_paramgen_curve:prime256v1 -nodes \
  -keyout superlink.key -out superlink.csr -subj "/CN=superlink" 2>/dev/null
openssl x509 -req -in superlink.csr -CA ca.crt -CAkey ca.key -CAcreateserial \
  -out superlink.crt -days "$days" \
  -extfile <(printf "subjectAltName=%s\nextendedKeyUsage=serverAuth\nbasicConstraints=CA:FALSE\n" "$names") \
  2>/dev/null
rm -f superlink.csr ca.srl
chmod 600 ca.key superlink.key
chmod 644 ca.crt superlink.crt
# The containers run as uid 49999 (user `app`), which must be able to read the key.
if [[ "$(id -u)" == 0 ]]; then
  chown 49999:49999 superlink.key
else
  echo "note: run 'sudo chown 49999 $out/superlink.key' so the SuperLink container can read it" >&2
fi
echo "wrote $(pwd)/{ca.crt,ca.key,superlink.crt,superlink.key} for $names"
