#!/usr/bin/env bash
# make-certs.sh OUT_DIR [SERVER_HOST...]
#
# Makes a private CA and the two certificates the mTLS link between cluster-autoscaler and
# `fleet serve` needs, with nothing but the openssl CLI:
#
#   ca.pem, ca-key.pem          a self-signed CA; fleet trusts clients it signed, CA trusts the server
#   server.pem, server-key.pem  fleet's serving certificate: serverAuth, one SAN per SERVER_HOST
#   client.pem, client-key.pem  cluster-autoscaler's client certificate: clientAuth, CN=cluster-autoscaler
#
# SERVER_HOST defaults to `localhost 127.0.0.1`. Give the host part of the cloud-config's
# `address` (e.g. fleet.fleet.svc): cluster-autoscaler checks the server certificate
# against exactly that name. Every run makes a new, unrelated CA. Keys are EC P-256 in PKCS#8,
# mode 600. It refuses to overwrite an existing file, so a CA that already signed certificates
# is never lost by a second run. Exit 1 on a failure, 2 on bad usage.
set -euo pipefail

readonly DAYS=825

usage() {
    echo "usage: $0 OUT_DIR [SERVER_HOST...]   (default hosts: localhost 127.0.0.1)" >&2
    exit 2
}

die() {
    echo "make-certs.sh: $*" >&2
    exit 1
}

[[ $# -ge 1 && -n $1 && $1 != -* ]] || usage
out=$1
shift
if [[ $# -eq 0 ]]; then
    set -- localhost 127.0.0.1
fi

command -v openssl >/dev/null 2>&1 || die "openssl not found on PATH"

# Sort each host into a DNS or an IP SAN; a name in an IP SAN (or the reverse) would never match.
dns_names=()
ip_addrs=()
for host in "$@"; do
    h=${host#[}
    h=${h%]}    # [::1] as written in an address is the address ::1
    if [[ $h =~ ^[0-9]{1,3}(\.[0-9]{1,3}){3}$ ]]; then
        IFS=. read -r a b c d <<<"$h"
        ((10#$a <= 255 && 10#$b <= 255 && 10#$c <= 255 && 10#$d <= 255)) || {
            echo "make-certs.sh: invalid IPv4 address $host" >&2
            exit 2
        }
        ip_addrs+=("$h")
    elif [[ $h == *:* ]]; then
        # A zone (%eth0) is local to one machine and cannot be put in a certificate.
        [[ $h =~ ^[0-9A-Fa-f:.]+$ ]] || {
            echo "make-certs.sh: invalid IPv6 address $host (no zone, no port)" >&2
            exit 2
        }
        ip_addrs+=("$h")
    elif [[ $h =~ ^(\*\.)?[A-Za-z0-9]([A-Za-z0-9-]*[A-Za-z0-9])?(\.[A-Za-z0-9]([A-Za-z0-9-]*[A-Za-z0-9])?)*$ ]]; then
        dns_names+=("$h")
    else
        echo "make-certs.sh: invalid host $host: a DNS name like fleet.fleet.svc or an IP address" >&2
        exit 2
    fi
done

files=(ca.pem ca-key.pem server.pem server-key.pem client.pem client-key.pem)
mkdir -p -- "$out"
for f in "${files[@]}"; do
    [[ ! -e $out/$f ]] || die "$out/$f already exists; remove it or choose another OUT_DIR"
done

# Everything is made in a private directory inside OUT_DIR and moved into place at the end, so a
# failure leaves no half-made set behind. Keys are born 600 (umask), never readable by others.
umask 077
work=$(mktemp -d "$out/.make-certs.XXXXXX")
trap 'rm -rf -- "$work"' EXIT

# Run openssl with its chatter captured; show it only when the command fails.
run() {
    if ! "$@" >"$work/log" 2>&1; then
        cat "$work/log" >&2
        die "failed: $*"
    fi
}

# A random 128-bit serial (read as a positive number): no two certificates share one, and no
# .srl file is left behind.
serial() {
    echo "0x$(openssl rand -hex 16)"
}

# A random tag in the CA's name, so two CAs made by this script have distinct subjects and a
# verifier never confuses one with the other.
ca_tag=$(openssl rand -hex 4)

san=()
for i in "${!dns_names[@]}"; do san+=("DNS.$((i + 1)) = ${dns_names[$i]}"); done
for i in "${!ip_addrs[@]}"; do san+=("IP.$((i + 1)) = ${ip_addrs[$i]}"); done

# One self-contained config: the system openssl.cnf plays no part, and prompt = no means no
# question is ever asked.
cat >"$work/openssl.cnf" <<EOF
[req]
prompt             = no
distinguished_name = dn

[dn]
CN = unused

[ca_ext]
basicConstraints       = critical, CA:TRUE, pathlen:0
keyUsage               = critical, keyCertSign, cRLSign
subjectKeyIdentifier   = hash
authorityKeyIdentifier = keyid:always

[server_ext]
basicConstraints       = critical, CA:FALSE
keyUsage               = critical, digitalSignature
extendedKeyUsage       = serverAuth
subjectKeyIdentifier   = hash
authorityKeyIdentifier = keyid
subjectAltName         = @alt_names

[client_ext]
basicConstraints       = critical, CA:FALSE
keyUsage               = critical, digitalSignature
extendedKeyUsage       = clientAuth
subjectKeyIdentifier   = hash
authorityKeyIdentifier = keyid

[alt_names]
$(printf '%s\n' "${san[@]}")
EOF

genkey() {
    run openssl genpkey -algorithm EC -pkeyopt ec_paramgen_curve:P-256 \
        -pkeyopt ec_param_enc:named_curve -out "$work/$1"
}

# The CA.
genkey ca-key.pem
run openssl req -config "$work/openssl.cnf" -new -x509 -sha256 -days "$DAYS" \
    -key "$work/ca-key.pem" -subj "/O=fleet/CN=fleet cluster-autoscaler CA $ca_tag" \
    -set_serial "$(serial)" -extensions ca_ext -out "$work/ca.pem"

# sign NAME SUBJECT EXTENSIONS: a key, a request, and a certificate signed by the CA.
sign() {
    genkey "$1-key.pem"
    run openssl req -config "$work/openssl.cnf" -new -sha256 \
        -key "$work/$1-key.pem" -subj "$2" -out "$work/$1.csr"
    run openssl x509 -req -sha256 -days "$DAYS" -in "$work/$1.csr" \
        -CA "$work/ca.pem" -CAkey "$work/ca-key.pem" -set_serial "$(serial)" \
        -extfile "$work/openssl.cnf" -extensions "$3" -out "$work/$1.pem"
}

# The server's CN is informational only (TLS clients check the SAN); the first host, if it fits.
server_cn=${dns_names[0]:-${ip_addrs[0]}}
((${#server_cn} <= 64)) || server_cn=fleet
sign server "/O=fleet/CN=$server_cn" server_ext
sign client "/O=fleet/CN=cluster-autoscaler" client_ext

# Check the set before handing it over.
run openssl verify -CAfile "$work/ca.pem" "$work/server.pem" "$work/client.pem"

chmod 600 "$work"/*-key.pem
chmod 644 "$work/ca.pem" "$work/server.pem" "$work/client.pem"
for f in "${files[@]}"; do
    mv -- "$work/$f" "$out/$f"
done
for f in "${files[@]}"; do
    echo "$out/$f"
done
