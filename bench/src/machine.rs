//! The machine a table was measured on: ratios only mean something next to the cores, the
//! memory and the kernel they came from.

use std::time::{SystemTime, UNIX_EPOCH};

/// What the table's header says about the host.
#[derive(Clone, Debug)]
pub struct Machine {
    /// Logical CPUs this process may use.
    pub cores: usize,
    /// The CPU model, when `/proc/cpuinfo` names one.
    pub cpu: Option<String>,
    /// Total memory in GiB.
    pub memory_gib: Option<f64>,
    /// The kernel release.
    pub kernel: String,
    /// The UTC date and time of the run.
    pub date: String,
    /// The effective uid the bench ran as (root measures root's code paths).
    pub euid: u32,
    /// How busy the host was when the bench started.
    pub load_before: Load,
}

/// How busy the host is: on a shared machine the same code measures differently, so the
/// table says how much else was running.
#[derive(Clone, Copy, Debug, Default, PartialEq)]
pub struct Load {
    /// The 1-minute load average.
    pub avg1: Option<f64>,
    /// The share of the last 60 s in which some task waited for a CPU (pressure stall
    /// information), in percent.
    pub cpu_pressure60: Option<f64>,
}

impl Load {
    /// Now.
    pub fn now() -> Self {
        Self {
            avg1: std::fs::read_to_string("/proc/loadavg")
                .ok()
                .and_then(|s| load_avg1(&s)),
            cpu_pressure60: std::fs::read_to_string("/proc/pressure/cpu")
                .ok()
                .and_then(|s| pressure_some60(&s)),
        }
    }

    /// As a phrase for the header.
    pub fn describe(&self) -> String {
        let mut parts = Vec::new();
        if let Some(l) = self.avg1 {
            parts.push(format!("load average {l:.2}"));
        }
        if let Some(p) = self.cpu_pressure60 {
            parts.push(format!("CPU pressure {p:.0}% (some, avg60)"));
        }
        if parts.is_empty() {
            "load unknown".into()
        } else {
            parts.join(", ")
        }
    }
}

fn load_avg1(loadavg: &str) -> Option<f64> {
    loadavg.split_whitespace().next()?.parse().ok()
}

fn pressure_some60(psi: &str) -> Option<f64> {
    let line = psi.lines().find(|l| l.starts_with("some "))?;
    line.split_whitespace()
        .find_map(|f| f.strip_prefix("avg60="))?
        .parse()
        .ok()
}

impl Machine {
    /// This host, now.
    pub fn detect() -> Self {
        let cpuinfo = std::fs::read_to_string("/proc/cpuinfo").unwrap_or_default();
        let meminfo = std::fs::read_to_string("/proc/meminfo").unwrap_or_default();
        Self {
            cores: std::thread::available_parallelism().map_or(1, |n| n.get()),
            cpu: cpu_model(&cpuinfo),
            memory_gib: mem_total_gib(&meminfo),
            kernel: std::fs::read_to_string("/proc/sys/kernel/osrelease")
                .map(|s| s.trim().to_string())
                .unwrap_or_else(|_| "unknown".into()),
            date: utc_now(),
            // SAFETY: geteuid has no preconditions and cannot fail.
            euid: unsafe { libc::geteuid() },
            load_before: Load::now(),
        }
    }

    /// One markdown line for the table's header; `after` is the load when the bench ended.
    pub fn describe(&self, after: &Load) -> String {
        let mut parts = vec![format!("{} cores", self.cores)];
        if let Some(cpu) = &self.cpu {
            parts.push(cpu.clone());
        }
        if let Some(m) = self.memory_gib {
            parts.push(format!("{m:.1} GiB memory"));
        }
        parts.push(format!("Linux {}", self.kernel));
        parts.push(format!("euid {}", self.euid));
        parts.push(self.date.clone());
        format!(
            "{}\n\nHost activity: before the run {}; at its end {} (the bench's own work included).",
            parts.join(" · "),
            self.load_before.describe(),
            after.describe()
        )
    }
}

fn cpu_model(cpuinfo: &str) -> Option<String> {
    cpuinfo
        .lines()
        .find(|l| l.starts_with("model name"))
        .and_then(|l| l.split_once(':'))
        .map(|(_, v)| v.trim().to_string())
}

fn mem_total_gib(meminfo: &str) -> Option<f64> {
    let line = meminfo.lines().find(|l| l.starts_with("MemTotal:"))?;
    let kib: f64 = line.split_whitespace().nth(1)?.parse().ok()?;
    Some(kib / (1024.0 * 1024.0))
}

fn utc_now() -> String {
    let secs = SystemTime::now()
        .duration_since(UNIX_EPOCH)
        .map_or(0, |d| d.as_secs());
    utc_string(secs)
}

/// `YYYY-MM-DD HH:MM UTC` for seconds since the epoch, without a date crate (the civil
/// calendar from days, after Howard Hinnant's `civil_from_days`).
fn utc_string(secs: u64) -> String {
    let days = (secs / 86_400) as i64;
    let rem = secs % 86_400;
    let z = days + 719_468;
    let era = z.div_euclid(146_097);
    let doe = z.rem_euclid(146_097);
    let yoe = (doe - doe / 1_460 + doe / 36_524 - doe / 146_096) / 365;
    let doy = doe - (365 * yoe + yoe / 4 - yoe / 100);
    let mp = (5 * doy + 2) / 153;
    let day = doy - (153 * mp + 2) / 5 + 1;
    let month = if mp < 10 { mp + 3 } else { mp - 9 };
    let year = yoe + era * 400 + i64::from(month <= 2);
    format!(
        "{year:04}-{month:02}-{day:02} {:02}:{:02} UTC",
        rem / 3_600,
        rem % 3_600 / 60
    )
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn dates_from_epoch_seconds() {
        assert_eq!(utc_string(0), "1970-01-01 00:00 UTC");
        // 2000-02-29 12:34 UTC: a leap day in a century leap year.
        assert_eq!(utc_string(951_827_640), "2000-02-29 12:34 UTC");
        // 2024-12-31 23:59 UTC.
        assert_eq!(utc_string(1_735_689_540), "2024-12-31 23:59 UTC");
    }

    #[test]
    fn load_and_pressure_are_parsed_from_proc() {
        assert_eq!(load_avg1("2.21 1.06 0.48 3/210 9469\n"), Some(2.21));
        let psi = "some avg10=38.50 avg60=34.97 avg300=17.60 total=86571941\n\
                   full avg10=0.00 avg60=0.00 avg300=0.00 total=0\n";
        assert_eq!(pressure_some60(psi), Some(34.97));
        assert_eq!(pressure_some60(""), None);
        let l = Load {
            avg1: Some(2.21),
            cpu_pressure60: Some(34.97),
        };
        assert_eq!(
            l.describe(),
            "load average 2.21, CPU pressure 35% (some, avg60)"
        );
    }

    #[test]
    fn cpu_and_memory_are_parsed_from_proc() {
        let cpu = "processor\t: 0\nmodel name\t: Example CPU @ 2.00GHz\nflags\t: fpu\n";
        assert_eq!(cpu_model(cpu).as_deref(), Some("Example CPU @ 2.00GHz"));
        let mem = "MemTotal:       24576000 kB\nMemFree: 1 kB\n";
        let gib = mem_total_gib(mem).unwrap_or_default();
        assert!((gib - 23.4375).abs() < 1e-9, "{gib}");
        assert_eq!(cpu_model(""), None);
    }
}
