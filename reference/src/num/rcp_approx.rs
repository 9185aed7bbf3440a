//! Emulation of PTX `rcp.approx.ftz.f32` (SASS `MUFU.RCP`), the reciprocal TRT-LLM's NVFP4
//! quantizer uses for its scale factors (SPEC.md, NVFP4).
//!
//! Facts matched (PTX ISA): `.ftz` flushes subnormal inputs to sign-preserving zero and
//! subnormal results to sign-preserving zero; `rcp(+-0) = +-inf`, `rcp(+-inf) = +-0`,
//! `rcp(NaN) = NaN`; the hardware result is an approximation with a maximum error of about
//! 1 ulp, i.e. NOT always the correctly rounded `1/x`.
//!
//! Method. For a normal `x = (-1)^s * 1.m * 2^e` the reciprocal is `(-1)^s * (1 / 1.m) * 2^-e`,
//! so the significand of the result depends only on the 23-bit input mantissa `m` (the hardware
//! range-reduces the same way). Both entry points therefore share one skeleton:
//!
//! 1. NaN -> canonical NaN `0x7FFF_FFFF` (the payload is not modelled); +-inf -> +-0; zero or
//!    subnormal input (flushed to +-0) -> +-inf.
//! 2. `r = rcp_significand(m)`: the f32 bits of the reciprocal of `1.m`, a value in `[0.5, 1]`.
//! 3. Result exponent = exponent of `r` minus `e`; if that biased exponent is <= 0 the result is
//!    subnormal and is flushed to +-0. This happens for `|x| > 2^126` (and for `|x| = 2^127`);
//!    `|x| = 2^126` gives exactly `2^-126`, the smallest normal, which is kept. No overflow is
//!    possible (the smallest normal input 2^-126 gives 2^126).
//!
//! The entry points differ only in step 2:
//!
//! * [`rcp_approx_ftz`] — THE MODEL THE REFERENCE USES: the significand measured on an NVIDIA
//!   H200 (sm_90, driver 580.159.04): the correctly rounded `1/1.m` plus a per-mantissa
//!   correction of exactly +-1 ulp where the hardware differs, which it does for 1,108,522 of
//!   the 2^23 mantissas (13.2%; +1 ulp for about two thirds of them). The corrections are
//!   embedded (`rcp_approx_sm90.zip`, 123 KB: one deflated stream of varints
//!   `2*(gap to the previous corrected mantissa - 1) + (delta > 0)`).
//!   Verified bit for bit against the hardware by `gpu/tests/rcp_measure.rs` (run on the H200
//!   by `scripts/gpu-test.sh`): (1) `rcp.approx.ftz.f32` of every mantissa at exponent 0, (2) ALL
//!   2^32 f32 inputs on the GPU against this table-driven skeleton (0 mismatches: the result
//!   significand depends only on `m`, special values and ftz behave as described), and (3) 2^20
//!   random inputs plus specials against these Rust functions on the CPU (0 mismatches).
//!   Other GPU generations were not measured.
//! * [`rcp_approx_ftz_correctly_rounded`] — the earlier model: `1/1.m` correctly rounded to f32
//!   (an f64 division rounded to f32; with 53 >= 2*24 + 2 bits the double rounding is
//!   innocuous). It differs from the hardware by one ulp on the mantissas above.
//! * [`rcp_approx_ftz_with_table`] — step 2 reads an [`RcpTable`] of `2^23` entries (e.g.
//!   [`measured_table`], or a new measurement written by `gpu/tests/rcp_measure.rs` to
//!   `$DUET_OUT/rcp_corrections.bin` in the corrections encoding).

use thiserror::Error;

/// Number of f32 mantissas (entries of a dense [`RcpTable`]).
pub const RCP_TABLE_LEN: usize = 1 << 23;

const MAGIC: &[u8; 8] = b"DUETRCP1";
const HEADER_LEN: usize = 24;
const ENCODING_DENSE: u32 = 0;
const ENCODING_CORRECTIONS: u32 = 1;
/// f32 bits of 0.5 and 1.0: the range every table entry must lie in.
const HALF_BITS: u32 = 0x3F00_0000;
const ONE_BITS: u32 = 0x3F80_0000;

/// Errors reading or building an [`RcpTable`].
#[derive(Debug, Error, PartialEq, Eq)]
pub enum RcpTableError {
    #[error("rcp table: bad magic {found:02x?} (expected \"DUETRCP1\"); the input is not a table written by RcpTable::to_bytes/to_bytes_corrections")]
    BadMagic { found: Vec<u8> },
    #[error("rcp table: unknown encoding {0} in the header (0 = dense, 1 = corrections); regenerate the table with this version of duet")]
    UnknownEncoding(u32),
    #[error("rcp table: {what} has {got} bytes/entries, expected {expected}; the table is truncated or was written by another version, regenerate it")]
    Length {
        what: &'static str,
        expected: u64,
        got: u64,
    },
    #[error("rcp table: entry for mantissa {mantissa:#08x} is f32 bits {bits:#010x}, outside [0.5, 1.0] (bits 0x3f000000..=0x3f800000); the reciprocal of a value in [1, 2) must lie there: check the measurement kernel")]
    EntryOutOfRange { mantissa: u32, bits: u32 },
    #[error("rcp table: correction #{index} names mantissa {mantissa:#x}, which is not a 23-bit mantissa or not strictly increasing after the previous one; sort and deduplicate the corrections")]
    BadCorrection { index: u64, mantissa: u32 },
}

/// Per-mantissa reciprocal table: entry `m` is the f32 bits of `rcp(1.m)` (input in `[1, 2)`,
/// output in `[0.5, 1]`), as measured on the hardware or computed by a model.
///
/// Binary format (little endian): 8-byte magic `DUETRCP1`; u32 encoding; u32 reserved (0);
/// u64 count; then either `count == 2^23` u32 entries (encoding 0, dense) or `count` pairs
/// `(u32 mantissa, u32 result bits)` with strictly increasing mantissas (encoding 1,
/// corrections over the correctly rounded model).
#[derive(Clone, PartialEq, Eq)]
pub struct RcpTable {
    entries: Vec<u32>,
}

impl std::fmt::Debug for RcpTable {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("RcpTable")
            .field(
                "differences_from_correctly_rounded",
                &self.corrections().len(),
            )
            .finish()
    }
}

/// Correctly rounded f32 bits of `1 / 1.m` (the default model of the hardware significand).
pub fn correctly_rounded_significand_rcp(mantissa: u32) -> u32 {
    let s = f32::from_bits(ONE_BITS | (mantissa & 0x7F_FFFF)) as f64;
    ((1.0 / s) as f32).to_bits()
}

fn check_entry(mantissa: u32, bits: u32) -> Result<(), RcpTableError> {
    if (HALF_BITS..=ONE_BITS).contains(&bits) {
        Ok(())
    } else {
        Err(RcpTableError::EntryOutOfRange { mantissa, bits })
    }
}

fn read_u32(b: &[u8], at: usize) -> u32 {
    u32::from_le_bytes([b[at], b[at + 1], b[at + 2], b[at + 3]])
}

impl RcpTable {
    /// The table of the default model (correctly rounded `1/1.m`).
    pub fn correctly_rounded() -> Self {
        let entries = (0..RCP_TABLE_LEN as u32)
            .map(correctly_rounded_significand_rcp)
            .collect();
        Self { entries }
    }

    /// A table from `2^23` entries (entry `m` = f32 bits of `rcp(1.m)`); each must be in
    /// `[0.5, 1.0]`.
    pub fn from_entries(entries: Vec<u32>) -> Result<Self, RcpTableError> {
        if entries.len() != RCP_TABLE_LEN {
            return Err(RcpTableError::Length {
                what: "entry list",
                expected: RCP_TABLE_LEN as u64,
                got: entries.len() as u64,
            });
        }
        for (m, &bits) in entries.iter().enumerate() {
            check_entry(m as u32, bits)?;
        }
        Ok(Self { entries })
    }

    /// The correctly rounded table with the listed `(mantissa, result bits)` entries replaced.
    /// Mantissas must be < 2^23 and strictly increasing.
    pub fn from_corrections(corrections: &[(u32, u32)]) -> Result<Self, RcpTableError> {
        let mut table = Self::correctly_rounded();
        let mut prev: Option<u32> = None;
        for (i, &(m, bits)) in corrections.iter().enumerate() {
            if m as usize >= RCP_TABLE_LEN || prev.is_some_and(|p| m <= p) {
                return Err(RcpTableError::BadCorrection {
                    index: i as u64,
                    mantissa: m,
                });
            }
            check_entry(m, bits)?;
            table.entries[m as usize] = bits;
            prev = Some(m);
        }
        Ok(table)
    }

    /// f32 bits of `rcp(1.m)` for the 23-bit mantissa `m` (higher bits of `mantissa` ignored).
    pub fn entry(&self, mantissa: u32) -> u32 {
        self.entries[(mantissa & 0x7F_FFFF) as usize]
    }

    /// The entries that differ from the correctly rounded model, as sorted `(mantissa, bits)`.
    pub fn corrections(&self) -> Vec<(u32, u32)> {
        self.entries
            .iter()
            .enumerate()
            .filter(|&(m, &bits)| bits != correctly_rounded_significand_rcp(m as u32))
            .map(|(m, &bits)| (m as u32, bits))
            .collect()
    }

    /// Dense encoding (32 MiB + header).
    pub fn to_bytes(&self) -> Vec<u8> {
        let mut out = Vec::with_capacity(HEADER_LEN + 4 * RCP_TABLE_LEN);
        write_header(&mut out, ENCODING_DENSE, RCP_TABLE_LEN as u64);
        for &e in &self.entries {
            out.extend_from_slice(&e.to_le_bytes());
        }
        out
    }

    /// Corrections encoding: only the entries that differ from the correctly rounded model.
    pub fn to_bytes_corrections(&self) -> Vec<u8> {
        let corr = self.corrections();
        let mut out = Vec::with_capacity(HEADER_LEN + 8 * corr.len());
        write_header(&mut out, ENCODING_CORRECTIONS, corr.len() as u64);
        for (m, bits) in corr {
            out.extend_from_slice(&m.to_le_bytes());
            out.extend_from_slice(&bits.to_le_bytes());
        }
        out
    }

    /// Reads either encoding (see the type doc); validates length, ranges and order.
    pub fn from_bytes(bytes: &[u8]) -> Result<Self, RcpTableError> {
        if bytes.len() < HEADER_LEN {
            return Err(RcpTableError::Length {
                what: "header",
                expected: HEADER_LEN as u64,
                got: bytes.len() as u64,
            });
        }
        if bytes[..8] != MAGIC[..] {
            return Err(RcpTableError::BadMagic {
                found: bytes[..8].to_vec(),
            });
        }
        let encoding = read_u32(bytes, 8);
        let count = u64::from_le_bytes([
            bytes[16], bytes[17], bytes[18], bytes[19], bytes[20], bytes[21], bytes[22], bytes[23],
        ]);
        let payload = &bytes[HEADER_LEN..];
        match encoding {
            ENCODING_DENSE => {
                if count != RCP_TABLE_LEN as u64 {
                    return Err(RcpTableError::Length {
                        what: "dense entry count",
                        expected: RCP_TABLE_LEN as u64,
                        got: count,
                    });
                }
                check_payload(payload, 4 * count)?;
                let entries = payload.chunks_exact(4).map(|c| read_u32(c, 0)).collect();
                Self::from_entries(entries)
            }
            ENCODING_CORRECTIONS => {
                check_payload(payload, count.saturating_mul(8))?;
                let corr: Vec<(u32, u32)> = payload
                    .chunks_exact(8)
                    .map(|c| (read_u32(c, 0), read_u32(c, 4)))
                    .collect();
                Self::from_corrections(&corr)
            }
            other => Err(RcpTableError::UnknownEncoding(other)),
        }
    }
}

fn write_header(out: &mut Vec<u8>, encoding: u32, count: u64) {
    out.extend_from_slice(MAGIC);
    out.extend_from_slice(&encoding.to_le_bytes());
    out.extend_from_slice(&0u32.to_le_bytes());
    out.extend_from_slice(&count.to_le_bytes());
}

fn check_payload(payload: &[u8], expected: u64) -> Result<(), RcpTableError> {
    if payload.len() as u64 != expected {
        return Err(RcpTableError::Length {
            what: "payload",
            expected,
            got: payload.len() as u64,
        });
    }
    Ok(())
}

/// The shared skeleton (module doc, steps 1-3); `significand_rcp(m)` gives step 2.
fn rcp_ftz_with(x: f32, significand_rcp: impl Fn(u32) -> u32) -> f32 {
    let bits = x.to_bits();
    let sign = bits & 0x8000_0000;
    let exp = (bits >> 23) & 0xFF;
    let mantissa = bits & 0x7F_FFFF;
    if exp == 0xFF {
        return if mantissa != 0 {
            f32::from_bits(0x7FFF_FFFF)
        } else {
            f32::from_bits(sign)
        };
    }
    if exp == 0 {
        // +-0 and subnormals (flushed to +-0 by .ftz).
        return f32::from_bits(sign | 0x7F80_0000);
    }
    let r = significand_rcp(mantissa);
    // r is in [0.5, 1]: biased exponent 126 or 127. Subtract the unbiased input exponent.
    let result_exp = (r >> 23) as i32 - (exp as i32 - 127);
    if result_exp <= 0 {
        return f32::from_bits(sign); // subnormal result flushed
    }
    f32::from_bits(sign | ((result_exp as u32) << 23) | (r & 0x7F_FFFF))
}

/// `rcp.approx.ftz.f32` as the H200 computes it, bit for bit (module doc: measured table).
pub fn rcp_approx_ftz(x: f32) -> f32 {
    rcp_ftz_with(x, measured_significand_rcp)
}

/// The earlier model: correctly rounded reciprocal with ftz on input and output. Differs from
/// the hardware by one ulp on 13% of mantissas.
pub fn rcp_approx_ftz_correctly_rounded(x: f32) -> f32 {
    rcp_ftz_with(x, correctly_rounded_significand_rcp)
}

/// The embedded H200 measurement (module doc).
const MEASURED_SM90_ZIP: &[u8] = include_bytes!("rcp_approx_sm90.zip");
/// Number of corrections in the embedded measurement.
pub const MEASURED_SM90_CORRECTIONS: usize = 1_108_522;

/// Decodes the embedded measurement into `(mantissa, +1 | -1)` pairs, sorted by mantissa.
fn decode_measured() -> Result<Vec<(u32, i32)>, String> {
    use std::io::Read;
    let mut zip = zip::ZipArchive::new(std::io::Cursor::new(MEASURED_SM90_ZIP))
        .map_err(|e| format!("rcp_approx_sm90.zip: {e}"))?;
    let mut raw = Vec::new();
    zip.by_name("corrections.varint")
        .map_err(|e| format!("rcp_approx_sm90.zip: {e}"))?
        .read_to_end(&mut raw)
        .map_err(|e| format!("rcp_approx_sm90.zip: {e}"))?;
    let mut out = Vec::with_capacity(MEASURED_SM90_CORRECTIONS);
    let (mut prev, mut v, mut shift) = (-1i64, 0u64, 0u32);
    for b in raw {
        v |= ((b & 0x7F) as u64) << shift;
        shift += 7;
        if b & 0x80 == 0 {
            let m = prev + 1 + (v >> 1) as i64;
            if m >= RCP_TABLE_LEN as i64 || shift > 35 {
                return Err(format!("rcp_approx_sm90.zip: mantissa {m} out of range"));
            }
            out.push((m as u32, if v & 1 == 1 { 1 } else { -1 }));
            prev = m;
            v = 0;
            shift = 0;
        }
    }
    Ok(out)
}

/// 2 bits per mantissa: 0 = correctly rounded, 1 = +1 ulp, 2 = -1 ulp.
// The table is compiled into the binary (include_bytes!) and decoded by the unit tests: a
// decode failure is a build defect, not an input error, so it may stop the program.
#[allow(clippy::expect_used)]
fn measured_deltas() -> &'static [u8] {
    static D: std::sync::OnceLock<Vec<u8>> = std::sync::OnceLock::new();
    D.get_or_init(|| {
        let mut d = vec![0u8; RCP_TABLE_LEN / 4];
        // The data is compiled in and checked by the tests below: a failure is a build defect.
        let corr = decode_measured().expect("embedded rcp_approx_sm90.zip must decode");
        for (m, delta) in corr {
            let code = if delta > 0 { 1u8 } else { 2u8 };
            d[(m >> 2) as usize] |= code << (2 * (m & 3));
        }
        d
    })
}

/// The measured H200 significand of `rcp(1.m)` (f32 bits in [0.5, 1]).
pub fn measured_significand_rcp(mantissa: u32) -> u32 {
    let m = mantissa & 0x7F_FFFF;
    let cr = correctly_rounded_significand_rcp(m);
    match (measured_deltas()[(m >> 2) as usize] >> (2 * (m & 3))) & 3 {
        1 => cr + 1,
        2 => cr - 1,
        _ => cr,
    }
}

/// The measured H200 table as an [`RcpTable`] (32 MiB; built on each call).
pub fn measured_table() -> RcpTable {
    RcpTable {
        entries: (0..RCP_TABLE_LEN as u32)
            .map(measured_significand_rcp)
            .collect(),
    }
}

/// `rcp.approx.ftz.f32` with the result significand read from a measured [`RcpTable`].
pub fn rcp_approx_ftz_with_table(x: f32, table: &RcpTable) -> f32 {
    rcp_ftz_with(x, |m| table.entry(m))
}

#[cfg(test)]
mod tests {
    use super::*;
    use proptest::prelude::*;
    use std::sync::OnceLock;

    fn cr_table() -> &'static RcpTable {
        static T: OnceLock<RcpTable> = OnceLock::new();
        T.get_or_init(RcpTable::correctly_rounded)
    }

    /// Independent model: f64 division rounded to f32, then ftz of input and output.
    fn direct(x: f32) -> f32 {
        let xf = if x.is_subnormal() {
            0.0f32.copysign(x)
        } else {
            x
        };
        let r = (1.0 / xf as f64) as f32;
        if r.is_subnormal() {
            0.0f32.copysign(r)
        } else {
            r
        }
    }

    #[test]
    fn special_values() {
        let p126 = 2f32.powi(126);
        let cases: [(f32, f32); 14] = [
            (0.0, f32::INFINITY),
            (-0.0, f32::NEG_INFINITY),
            (f32::from_bits(1), f32::INFINITY), // subnormal input flushed
            (-f32::from_bits(0x007F_FFFF), f32::NEG_INFINITY),
            (f32::INFINITY, 0.0),
            (f32::NEG_INFINITY, -0.0),
            (p126, 2f32.powi(-126)), // exactly the smallest normal: kept
            (1.5 * p126, 0.0),       // subnormal result flushed
            (-2f32.powi(127), -0.0),
            (f32::MAX, 0.0),
            (f32::MIN_POSITIVE, p126),
            (4.0, 0.25),
            (-0.5, -2.0),
            (6.0, 1.0 / 6.0),
        ];
        for (x, want) in cases {
            let got = rcp_approx_ftz(x);
            assert_eq!(
                got.to_bits(),
                want.to_bits(),
                "rcp({x:e}) = {got:e}, want {want:e}"
            );
        }
        assert!(rcp_approx_ftz(f32::NAN).is_nan());
        assert!(rcp_approx_ftz(-f32::NAN).is_nan());
        // Just above 2^126 the exact reciprocal is below 2^-126: flushed.
        assert_eq!(rcp_approx_ftz(f32::from_bits(0x7E80_0001)).to_bits(), 0);
        // Just below 2^126 it is normal.
        assert!(rcp_approx_ftz(f32::from_bits(0x7E7F_FFFF)) >= f32::MIN_POSITIVE);
    }

    #[test]
    fn measured_table_decodes_and_matches_known_hardware_values() {
        let corr = decode_measured().expect("embedded table");
        assert_eq!(corr.len(), MEASURED_SM90_CORRECTIONS);
        assert!(corr.windows(2).all(|w| w[0].0 < w[1].0));
        let plus = corr.iter().filter(|c| c.1 > 0).count();
        assert!(plus > corr.len() / 2 && plus < corr.len() * 3 / 4, "{plus}");
        // Raw (mantissa, hardware bits) pairs from the H200 measurement file.
        for (m, hw) in [
            (0x5A9u32, 0x3F7F_F4AEu32),
            (0x5AA, 0x3F7F_F4AC),
            (0x5AD, 0x3F7F_F4A6),
        ] {
            assert_eq!(measured_significand_rcp(m), hw, "mantissa {m:#x}");
            assert_ne!(correctly_rounded_significand_rcp(m), hw, "mantissa {m:#x}");
            let x = f32::from_bits(0x3F80_0000 | m) * 4.0;
            assert_eq!(rcp_approx_ftz(x).to_bits(), hw - (2 << 23), "x = {x:e}");
        }
        let t = measured_table();
        assert_eq!(t.corrections().len(), MEASURED_SM90_CORRECTIONS);
        assert_eq!(
            RcpTable::from_bytes(&t.to_bytes_corrections()).as_ref(),
            Ok(&t)
        );
    }

    #[test]
    fn table_round_trips_and_is_used() {
        let base = cr_table();
        assert!(base.corrections().is_empty());
        // A fake "measurement": a few mantissas off by one ulp either way.
        let fake = vec![
            (1u32, base.entry(1) - 1),
            (0x2A_AAAB, base.entry(0x2A_AAAB) + 1),
            (0x7F_FFFF, HALF_BITS),
        ];
        let t = RcpTable::from_corrections(&fake).expect("valid corrections");
        assert_eq!(t.corrections(), fake);
        let sparse = t.to_bytes_corrections();
        assert_eq!(sparse.len(), HEADER_LEN + 8 * fake.len());
        assert_eq!(RcpTable::from_bytes(&sparse).as_ref(), Ok(&t));
        let dense = t.to_bytes();
        assert_eq!(dense.len(), HEADER_LEN + 4 * RCP_TABLE_LEN);
        assert_eq!(RcpTable::from_bytes(&dense).as_ref(), Ok(&t));
        // The corrected mantissas change the emulated result at every normal exponent.
        for e in [1u32, 60, 127, 200, 253] {
            for &(m, bits) in &fake {
                let x = f32::from_bits((e << 23) | m);
                let got = rcp_approx_ftz_with_table(x, &t);
                let model = rcp_approx_ftz_correctly_rounded(x);
                if model != 0.0 {
                    assert_ne!(got.to_bits(), model.to_bits(), "x = {x:e}");
                    assert_eq!(got.to_bits() & 0x7F_FFFF, bits & 0x7F_FFFF, "x = {x:e}");
                }
            }
        }
    }

    #[test]
    fn from_bytes_rejects_bad_input() {
        let good = RcpTable::correctly_rounded().to_bytes_corrections();
        assert!(matches!(
            RcpTable::from_bytes(&good[..10]),
            Err(RcpTableError::Length { .. })
        ));
        let mut bad = good.clone();
        bad[0] = b'X';
        assert!(matches!(
            RcpTable::from_bytes(&bad),
            Err(RcpTableError::BadMagic { .. })
        ));
        let mut bad = good.clone();
        bad[8] = 7;
        assert_eq!(
            RcpTable::from_bytes(&bad),
            Err(RcpTableError::UnknownEncoding(7))
        );
        // One correction with an out-of-range value (2.0).
        let mut bad = good.clone();
        bad[16] = 1;
        bad.extend_from_slice(&5u32.to_le_bytes());
        bad.extend_from_slice(&0x4000_0000u32.to_le_bytes());
        assert_eq!(
            RcpTable::from_bytes(&bad),
            Err(RcpTableError::EntryOutOfRange {
                mantissa: 5,
                bits: 0x4000_0000
            })
        );
        assert!(matches!(
            RcpTable::from_corrections(&[(9, ONE_BITS - 1), (9, ONE_BITS - 1)]),
            Err(RcpTableError::BadCorrection { index: 1, .. })
        ));
        assert!(matches!(
            RcpTable::from_entries(vec![ONE_BITS; 3]),
            Err(RcpTableError::Length { .. })
        ));
    }

    proptest! {
        #![proptest_config(ProptestConfig::with_cases(2000))]

        #[test]
        fn correctly_rounded_model_matches_direct_division(b in any::<u32>()) {
            let x = f32::from_bits(b);
            let got = rcp_approx_ftz_correctly_rounded(x);
            let want = direct(x);
            if want.is_nan() {
                prop_assert!(got.is_nan());
            } else {
                prop_assert_eq!(got.to_bits(), want.to_bits(), "x = {:e}", x);
            }
        }

        #[test]
        fn table_path_equals_correctly_rounded_model_with_its_table(b in any::<u32>()) {
            let x = f32::from_bits(b);
            let a = rcp_approx_ftz_correctly_rounded(x);
            let t = rcp_approx_ftz_with_table(x, cr_table());
            prop_assert!(a.to_bits() == t.to_bits() || (a.is_nan() && t.is_nan()));
        }

        #[test]
        fn within_half_ulp_in_normal_range(x in 1e-30f32..1e30) {
            let r = rcp_approx_ftz_correctly_rounded(x) as f64;
            let exact = 1.0 / x as f64;
            let ulp = 2f64.powi(exact.log2().floor() as i32 - 23);
            prop_assert!((r - exact).abs() <= 0.5 * ulp, "x = {x:e}");
            // The hardware (measured) is within one ulp.
            let h = rcp_approx_ftz(x) as f64;
            prop_assert!((h - exact).abs() < ulp, "x = {x:e}: measured {h:e}");
        }
    }
}
