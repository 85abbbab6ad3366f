//! A cursor over bytes that never reads past their end: the one decoding step of Weir's binary
//! formats (the shuffle's messages, the session and dedup logs' entries). Each format names its
//! byte order at every read; a read past the end is an error naming the byte where the input
//! ran out, never a panic, whatever the input.

pub struct ByteReader<'a> {
    b: &'a [u8],
    i: usize,
}

impl<'a> ByteReader<'a> {
    pub fn new(b: &'a [u8]) -> Self {
        Self { b, i: 0 }
    }

    /// The offset of the next byte to read.
    pub fn at(&self) -> usize {
        self.i
    }

    pub fn take(&mut self, n: usize) -> Result<&'a [u8], String> {
        let end = self.i.checked_add(n).filter(|&e| e <= self.b.len());
        let s = end.map(|e| &self.b[self.i..e]).ok_or_else(|| format!("cut short at byte {}", self.i))?;
        self.i += n;
        Ok(s)
    }

    pub fn array<const N: usize>(&mut self) -> Result<[u8; N], String> {
        let mut a = [0u8; N];
        a.copy_from_slice(self.take(N)?);
        Ok(a)
    }

    pub fn u32_le(&mut self) -> Result<u32, String> {
        Ok(u32::from_le_bytes(self.array()?))
    }

    pub fn u64_le(&mut self) -> Result<u64, String> {
        Ok(u64::from_le_bytes(self.array()?))
    }

    pub fn i64_le(&mut self) -> Result<i64, String> {
        Ok(i64::from_le_bytes(self.array()?))
    }

    pub fn u32_be(&mut self) -> Result<u32, String> {
        Ok(u32::from_be_bytes(self.array()?))
    }

    pub fn i64_be(&mut self) -> Result<i64, String> {
        Ok(i64::from_be_bytes(self.array()?))
    }
}
